// JITLLM_CLIENT_API marks what libjitllmclient.so exports; everything else in it is hidden.
#pragma once

#define JITLLM_CLIENT_API __attribute__((visibility("default")))
