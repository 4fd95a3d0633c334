/* Threads of one call. The core assumes a thread count in [1, MAX_THREADS] (the binding clamps what it is
 * given; threads_clamp is that clamp), so sums such as 2·threads or 4·threads cannot overflow. */
#ifndef PROOFLANE_THREADS_H
#define PROOFLANE_THREADS_H

#include <pthread.h>

#define MAX_THREADS 64 /* threads of one call, the caller's included: more are asked for, these run */

static inline int threads_clamp(long long threads) {
    return threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : (int)threads;
}

/* Run worker(job) on min(threads, units) threads, this one included; the workers share the units. A
 * thread the system refuses leaves its share to the others. */
static void run_threads(void *(*worker)(void *), void *job, int threads, int units) {
    int extra = (threads < units ? threads : units) - 1;
    pthread_t ids[MAX_THREADS];
    if (extra > MAX_THREADS - 1) extra = MAX_THREADS - 1;
    int started = 0;
    for (; started < extra; started++)
        if (pthread_create(&ids[started], NULL, worker, job) != 0) break;
    worker(job);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
}

#endif
