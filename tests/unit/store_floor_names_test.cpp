// floor_names: the floors a proxy learned, used only to name the floor in a rejection the
// fence cache answers (backends/floor_names.hpp).
#include "backends/floor_names.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

using fk::store::floor_names;

TEST_CASE("floor_names names a learned floor only when its token is the cache's fence") {
    floor_names names;
    CHECK_FALSE(names.name_for("jobs/a", 10));

    names.learn("jobs/", 10);
    CHECK(names.name_for("jobs/a", 10) == std::string("jobs/"));
    CHECK(names.name_for("jobs/", 10) == std::string("jobs/"));
    // Another fence: the lock's own (above the floor), or a floor not learned here.
    CHECK_FALSE(names.name_for("jobs/a", 11));
    CHECK_FALSE(names.name_for("jobs/a", 9));
    // Not under the prefix.
    CHECK_FALSE(names.name_for("job", 10));
    CHECK_FALSE(names.name_for("other/a", 10));

    // The highest floor over a lock is the one named; floors only go up.
    names.learn("", 20);
    CHECK(names.name_for("jobs/a", 20) == std::string(""));
    CHECK_FALSE(names.name_for("jobs/a", 10));
    names.learn("jobs/", 30);
    CHECK(names.name_for("jobs/a", 30) == std::string("jobs/"));
    names.learn("jobs/", 5); // an older answer arriving late keeps the higher
    CHECK(names.name_for("jobs/a", 30) == std::string("jobs/"));
    CHECK(names.name_for("other/a", 20) == std::string(""));
}

TEST_CASE("floor_names keeps at most max_floors prefixes, and raises known ones past it") {
    floor_names names;
    for (std::size_t i = 0; i < fk::store::max_floors; ++i)
        names.learn("p" + std::to_string(i) + "/", 100);
    names.learn("beyond/", 100);
    CHECK_FALSE(names.name_for("beyond/x", 100));
    names.learn("p7/", 200);
    CHECK(names.name_for("p7/x", 200) == std::string("p7/"));
}

TEST_CASE("floor_names is safe from many threads") {
    floor_names names;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&names, t] {
            for (int i = 1; i <= 2000; ++i) {
                names.learn("t" + std::to_string(t) + "/", i);
                (void)names.name_for("t" + std::to_string((t + 1) % 4) + "/x", i);
            }
        });
    for (auto& th : threads)
        th.join();
    for (int t = 0; t < 4; ++t)
        CHECK(names.name_for("t" + std::to_string(t) + "/x", 2000) ==
              "t" + std::to_string(t) + "/");
}
