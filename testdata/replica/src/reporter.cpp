// The socket reporter (REPORTER=socket builds, see reporter.hpp). One connection per process,
// opened at the first message, to $TT_ALLOC_SERVER_SOCKET (default
// /tmp/tt_allocation_server.sock); each message is written with a blocking send under a mutex
// before the tracked call returns. If the server cannot be reached, reporting is off for the
// process (said once on stderr).
#include "reporter.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"
#include "report_message.hpp"

namespace tt::tt_metal::replica {
namespace {

using Message = ::tt::tt_metal::replica::ReportMessage;

struct Client {
    std::mutex mu;
    int fd = -1;
    bool tried = false;
    int32_t pid = 0;
};

Client& client() {
    static Client* c = new Client();  // never destroyed: reports may come during exit
    return *c;
}

// Requires c.mu held.
bool connect_locked(Client& c) {
    if (c.tried) return c.fd >= 0;
    c.tried = true;
    c.pid = static_cast<int32_t>(getpid());
    const char* path = std::getenv("TT_ALLOC_SERVER_SOCKET");
    if (path == nullptr || *path == '\0') path = "/tmp/tt_allocation_server.sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        std::fprintf(stderr, "tt_replica: reporter: cannot reach %s: %s: not reporting\n", path, std::strerror(errno));
        if (fd >= 0) close(fd);
        return false;
    }
    c.fd = fd;
    return true;
}

thread_local int32_t t_tid = 0;

}  // namespace

void report_buffer(int kind, const Buffer* buffer) {
    Message m{};
    m.kind = static_cast<uint8_t>(kind);
    m.buffer_type = static_cast<uint8_t>(buffer->buffer_type());
    m.device_id = buffer->device() ? buffer->device()->id() : -1;
    m.size = buffer->size();
    m.address = buffer->address();
    m.buffer_id = reinterpret_cast<uintptr_t>(buffer);
    if (t_tid == 0) t_tid = static_cast<int32_t>(syscall(SYS_gettid));
    m.tid = t_tid;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m.ts_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);

    Client& c = client();
    std::lock_guard<std::mutex> lock(c.mu);
    if (!connect_locked(c)) return;
    m.pid = c.pid;
    const char* p = reinterpret_cast<const char*>(&m);
    size_t left = sizeof(m);
    while (left > 0) {
        ssize_t n = send(c.fd, p, left, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            std::fprintf(stderr, "tt_replica: reporter: send: %s: not reporting\n", std::strerror(errno));
            close(c.fd);
            c.fd = -1;
            return;
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

}  // namespace tt::tt_metal::replica
