/* See include/CFoldtableBench.h for why these shims exist. */
#include "CFoldtableBench.h"

#include <stdlib.h>
#include <sys/epoll.h>

const uint32_t ftbench_epoll_in = EPOLLIN;
const uint32_t ftbench_epoll_out = EPOLLOUT;
const uint32_t ftbench_epoll_error_or_hangup = EPOLLERR | EPOLLHUP;

int ftbench_epoll_create(void)
{
    return epoll_create1(EPOLL_CLOEXEC);
}

int ftbench_epoll_set(int epfd, int fd, uint32_t events, uint64_t token, int modify)
{
    struct epoll_event event = {.events = events, .data.u64 = token};
    return epoll_ctl(epfd, modify ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event);
}

int ftbench_epoll_wait(int epfd, uint32_t *events, uint64_t *tokens, int max, int timeout_ms)
{
    /* One small stack buffer per call: the generator waits for at most 1024 events at a time. */
    struct epoll_event ready[1024];
    if (max > 1024)
        max = 1024;
    int count = epoll_wait(epfd, ready, max, timeout_ms);
    for (int i = 0; i < count; i++) {
        events[i] = ready[i].events;
        tokens[i] = ready[i].data.u64;
    }
    return count;
}
