// ttreportd: a minimal allocation server for the REPORTER=socket replica (src/reporter.cpp).
//   ttreportd SOCKET_PATH
// Listens on SOCKET_PATH, reads the 72-byte messages of every client (one thread each), keeps
// live bytes per device and buffer type, and on SIGINT/SIGTERM prints
//   reportd: N messages (A allocs, F frees) from C clients
// on stdout and exits. Used by scripts/bench.sh to price an in-process reporter.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include "../src/report_message.hpp"

namespace {

using Message = ::tt::tt_metal::replica::ReportMessage;

std::atomic<uint64_t> g_allocs{0}, g_frees{0}, g_other{0}, g_clients{0};
std::atomic<int> g_active{0};  // connections not yet at end of file
std::mutex g_mu;
std::map<std::pair<int32_t, int>, int64_t> g_live;  // (device, type) -> bytes

void serve(int fd) {
    static thread_local char buf[72 * 4096];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        have += static_cast<size_t>(n);
        size_t whole = have / sizeof(Message);
        {
            std::lock_guard<std::mutex> lock(g_mu);
            for (size_t i = 0; i < whole; ++i) {
                Message m;
                std::memcpy(&m, buf + i * sizeof(Message), sizeof(m));
                auto key = std::make_pair(static_cast<int32_t>(m.device_id), static_cast<int>(m.buffer_type));
                if (m.kind == 1) {
                    g_live[key] += static_cast<int64_t>(m.size);
                    g_allocs++;
                } else if (m.kind == 2) {
                    g_live[key] -= static_cast<int64_t>(m.size);
                    g_frees++;
                } else {
                    g_other++;
                }
            }
        }
        size_t used = whole * sizeof(Message);
        std::memmove(buf, buf + used, have - used);
        have -= used;
    }
    close(fd);
    g_active--;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: ttreportd SOCKET_PATH\n");
        return 2;
    }
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // inherited by every thread; main waits for them

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, argv[1], sizeof(addr.sun_path) - 1);
    unlink(argv[1]);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(lfd, 64) != 0) {
        std::fprintf(stderr, "ttreportd: %s: %s\n", argv[1], std::strerror(errno));
        return 1;
    }
    std::thread([lfd] {
        for (;;) {
            int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                return;
            }
            g_clients++;
            g_active++;
            std::thread(serve, fd).detach();
        }
    }).detach();

    int sig = 0;
    sigwait(&stop, &sig);
    unlink(argv[1]);
    // Count what clients that already hung up had sent (up to 5 s).
    for (int i = 0; i < 5000 && g_active.load() > 0; ++i) usleep(1000);
    std::printf("reportd: %" PRIu64 " messages (%" PRIu64 " allocs, %" PRIu64 " frees) from %" PRIu64 " clients\n",
                g_allocs.load() + g_frees.load() + g_other.load(), g_allocs.load(), g_frees.load(), g_clients.load());
    std::fflush(stdout);
    return 0;
}
