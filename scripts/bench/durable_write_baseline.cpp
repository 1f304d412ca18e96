// durable_write_baseline: the F baseline of scripts/bench.sh. What a program that writes
// files durably by itself, without fencekeeper, achieves on the same disk: THREADS threads,
// each in a loop for SECONDS, doing per write
//
//   open(DIR/.tmp-T-N, O_CREAT|O_EXCL) + write(BODY_BYTES) + fsync + close
//   rename(DIR/.tmp-T-N, DIR/T-N)
//   fsync(DIR)
//
// i.e. the crash-safe sequence for one new file, with no batching across threads. File
// names are TAG + "T-N" (TAG defaults to ""): runs that share DIR need distinct TAGs, or
// their renames replace the earlier runs' files instead of creating new ones.
// Prints "writes=N seconds=S writes_per_s=R".
//
// Build: g++ -O2 -std=c++20 -pthread durable_write_baseline.cpp -o durable_write_baseline
// Usage: durable_write_baseline DIR THREADS SECONDS BODY_BYTES [TAG]

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: %s DIR THREADS SECONDS BODY_BYTES [TAG]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int threads = std::atoi(argv[2]);
    const double seconds = std::atof(argv[3]);
    const std::string body(static_cast<std::size_t>(std::atol(argv[4])), 'x');
    const std::string tag = argc == 6 ? argv[5] : "";
    if (threads < 1 || seconds <= 0) {
        std::fprintf(stderr, "bad arguments\n");
        return 2;
    }

    std::atomic<bool> stop{false};
    std::atomic<bool> failed{false};
    std::vector<long long> counts(static_cast<std::size_t>(threads), 0);
    std::vector<std::thread> pool;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd < 0) {
                std::perror("open dir");
                failed = true;
                return;
            }
            long long n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                const std::string name = tag + std::to_string(t) + "-" + std::to_string(n);
                const std::string tmp = dir + "/.tmp-" + name;
                const std::string final_path = dir + "/" + name;
                const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0 ||
                    ::write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size()) ||
                    ::fsync(fd) != 0 || ::close(fd) != 0 ||
                    ::rename(tmp.c_str(), final_path.c_str()) != 0 || ::fsync(dfd) != 0) {
                    std::perror("write sequence");
                    failed = true;
                    break;
                }
                ++n;
            }
            counts[static_cast<std::size_t>(t)] = n;
            ::close(dfd);
        });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& th : pool)
        th.join();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    long long total = 0;
    for (auto c : counts)
        total += c;
    std::printf("writes=%lld seconds=%.2f writes_per_s=%.1f\n", total, elapsed,
                static_cast<double>(total) / elapsed);
    return failed ? 1 : 0;
}
