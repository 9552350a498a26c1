//go:build cgo

#include <pthread.h>
#include <stdint.h>
#include "_cgo_export.h"

void gcprobeCallBack(uintptr_t h) {
	gcprobeGoCallback(h);
}

static void *threadMain(void *arg) {
	gcprobeGoCallback((uintptr_t)arg);
	return NULL;
}

int gcprobeCallBackOnThread(uintptr_t h) {
	pthread_t t;
	int rc = pthread_create(&t, NULL, threadMain, (void *)h);
	if (rc != 0) {
		return rc;
	}
	return pthread_join(t, NULL);
}
