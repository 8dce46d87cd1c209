/*
 * CFoldtableBench: the few C calls the fan-out load generator needs that Swift cannot import.
 *
 * Why: Swift's Glibc module does not include <sys/epoll.h>, and struct epoll_event is packed on
 * x86_64 (its 64-bit data member sits at offset 4), which Swift cannot lay out. These shims keep
 * that struct on the C side and hand Swift plain arrays.
 */
#ifndef CFOLDTABLEBENCH_H
#define CFOLDTABLEBENCH_H

#include <stdint.h>

/* Event bits, re-exported because EPOLLIN and friends are enum constants in a header Swift
 * does not see. */
extern const uint32_t ftbench_epoll_in;
extern const uint32_t ftbench_epoll_out;
extern const uint32_t ftbench_epoll_error_or_hangup;

/* epoll_create1(EPOLL_CLOEXEC); -1 with errno on failure. */
int ftbench_epoll_create(void);
/* EPOLL_CTL_ADD (modify = 0) or EPOLL_CTL_MOD (modify = 1) of fd with events, reported as token. */
int ftbench_epoll_set(int epfd, int fd, uint32_t events, uint64_t token, int modify);
/* epoll_wait into two parallel arrays of at most max entries; returns the count or -1 (errno). */
int ftbench_epoll_wait(int epfd, uint32_t *events, uint64_t *tokens, int max, int timeout_ms);

#endif
