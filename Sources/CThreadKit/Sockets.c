// Sockets: the socket calls of TKSocketPort. Stateless; see include/CThreadKit.h for each contract.
#define _GNU_SOURCE
#include "CThreadKit.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int tk_fail_close(int fd) {
    int e = errno;
    close(fd);
    return -e;
}

static struct addrinfo *tk_lookup_flags(const char *host, uint16_t port, int flags, int *gai_error) {
    struct addrinfo hints, *result = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    char service[8];
    snprintf(service, sizeof service, "%u", (unsigned)port);
    int rc = getaddrinfo(host, service, &hints, &result);
    if (rc != 0) {
        if (gai_error) *gai_error = rc;
        return NULL;
    }
    return result;
}

static struct addrinfo *tk_lookup(const char *host, uint16_t port, int passive, int *gai_error) {
    return tk_lookup_flags(host, port, passive ? AI_PASSIVE : 0, gai_error);
}

int tk_resolve(const char *host) {
    int gai = 0;
    struct addrinfo *ai = tk_lookup(host, 0, 0, &gai);
    if (ai) freeaddrinfo(ai);
    return ai ? 0 : gai;
}

int tk_tcp_listen(const char *host, uint16_t port, uint16_t *bound, int *gai_error) {
    return tk_tcp_listen_backlog(host, port, 128, bound, gai_error);
}

int tk_tcp_listen_backlog(const char *host, uint16_t port, int backlog, uint16_t *bound, int *gai_error) {
    struct addrinfo *ai = tk_lookup(host, port, 1, gai_error);
    if (!ai) return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { int e = errno; freeaddrinfo(ai); return -e; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
        freeaddrinfo(ai);
        return tk_fail_close(fd);
    }
    freeaddrinfo(ai);
    struct sockaddr_storage local;
    socklen_t length = sizeof local;
    if (getsockname(fd, (struct sockaddr *)&local, &length) != 0) return tk_fail_close(fd);
    *bound = local.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&local)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&local)->sin_port);
    return fd;
}

static int tk_unix_address(const char *path, struct sockaddr_un *address) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof address->sun_path) return -ENAMETOOLONG;
    strcpy(address->sun_path, path);
    return 0;
}

int tk_unix_listen(const char *path, unsigned mode) {
    struct sockaddr_un address;
    int rc = tk_unix_address(path, &address);
    if (rc != 0) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) return tk_fail_close(fd);
    // Connecting needs listen(): until then nobody gets in, whatever the umask gave the file.
    if (chmod(path, (mode_t)mode) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        unlink(path);
        close(fd);
        return -e;
    }
    return fd;
}

int tk_peer_credentials(int fd, int *pid, unsigned *uid, unsigned *gid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -errno;
    *pid = credentials.pid;
    *uid = credentials.uid;
    *gid = credentials.gid;
    return 0;
}

static int tk_connect_started(int fd, const struct sockaddr *address, socklen_t length, int *in_progress) {
    *in_progress = 0;
    while (connect(fd, address, length) != 0) {
        if (errno == EINTR) continue;
        if (errno == EINPROGRESS) { *in_progress = 1; return fd; }
        return tk_fail_close(fd);
    }
    return fd;
}

int tk_tcp_connect(const char *host, uint16_t port, int *in_progress, int *gai_error) {
    struct addrinfo *ai = tk_lookup(host, port, 0, gai_error);
    if (!ai) return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { int e = errno; freeaddrinfo(ai); return -e; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    int rc = tk_connect_started(fd, ai->ai_addr, ai->ai_addrlen, in_progress);
    freeaddrinfo(ai);
    return rc;
}

int tk_unix_connect(const char *path, int *in_progress) {
    struct sockaddr_un address;
    int rc = tk_unix_address(path, &address);
    if (rc != 0) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    return tk_connect_started(fd, (struct sockaddr *)&address, sizeof address, in_progress);
}

int tk_accept(int fd) {
    int r;
    do { r = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); } while (r < 0 && errno == EINTR);
    return r >= 0 ? r : -errno;
}

int tk_poll1(int fd, short events, int timeout_ms) {
    struct pollfd p = { .fd = fd, .events = events, .revents = 0 };
    int r;
    do { r = poll(&p, 1, timeout_ms); } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    return r == 0 ? 0 : p.revents;
}

int tk_socket_error(int fd) {
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
    return error;
}

long tk_send(int fd, const void *bytes, size_t count) {
    long r;
    do { r = send(fd, bytes, count, MSG_NOSIGNAL); } while (r < 0 && errno == EINTR);
    return r >= 0 ? r : -errno;
}

int tk_peer_gone(int fd) {
    int revents = tk_poll1(fd, POLLIN | POLLRDHUP, 0);
    return revents != 0;
}

int tk_resolve_addresses(const char *host, uint16_t port, int numeric_only, struct sockaddr_storage *addresses,
                         unsigned *lengths, int max, int *gai_error) {
    struct addrinfo *result = tk_lookup_flags(host, port, numeric_only ? AI_NUMERICHOST : 0, gai_error);
    if (!result) return -EHOSTUNREACH;
    int count = 0;
    for (struct addrinfo *ai = result; ai && count < max; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(struct sockaddr_storage)) continue;
        memcpy(&addresses[count], ai->ai_addr, ai->ai_addrlen);
        lengths[count] = (unsigned)ai->ai_addrlen;
        count++;
    }
    freeaddrinfo(result);
    return count;
}

int tk_connect_address(const struct sockaddr_storage *address, unsigned length, int *in_progress) {
    int fd = socket(address->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    return tk_connect_started(fd, (const struct sockaddr *)address, (socklen_t)length, in_progress);
}

int tk_set_nonblocking_cloexec(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
    int fdflags = fcntl(fd, F_GETFD);
    if (fdflags < 0 || fcntl(fd, F_SETFD, fdflags | FD_CLOEXEC) < 0) return -errno;
    return 0;
}

long tk_recv(int fd, void *bytes, size_t count) {
    long r;
    do { r = recv(fd, bytes, count, 0); } while (r < 0 && errno == EINTR);
    return r >= 0 ? r : -errno;
}
