/*
 * test_install.c - `make install` into a temporary prefix, then an outside program
 * (tests/cmake/embed.c) built against the installed tree twice: with pkg-config and with
 * CMake's find_package(Fleet) (tests/cmake/CMakeLists.txt, shared and static targets).
 * Each case installs with NOBUILD=1 from this test's own build directory, so nothing is
 * rebuilt; a sanitizer build's -fsanitize flags are passed on to the outside build, whose
 * library is instrumented.  Needs cc, pkg-config and cmake (the test profile of
 * scripts/ensure-deps.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testhelp.h"

static char root[4096], build[4096], tmp[64], prefix[128], san[512];

/* Runs `cmd` with sh, output (stdout and stderr) into out; returns the exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
    char full[12288];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) TFAIL("popen failed: %s", cmd);
    size_t n = 0, k;
    char sink[4096];
    while ((k = fread(n + 1 < cap ? out + n : sink, 1, n + 1 < cap ? cap - n - 1 : sizeof sink, p)) > 0)
        if (n + 1 < cap) n += k;
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void run_ok(const char *what, const char *cmd, char *out, size_t cap)
{
    int rc = run(cmd, out, cap);
    if (rc != 0) {
        size_t n = strlen(out);
        TFAIL("%s failed (exit %d): %s\n--- output (tail) ---\n%s", what, rc, cmd, n > 3000 ? out + n - 3000 : out);
    }
}

static int exists(const char *rel)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", prefix, rel);
    return stat(p, &st) == 0;
}

/* Finds the tree and the build dir, makes the prefix and installs into it. */
static void install(void)
{
    char out[16384], cmd[12288];
    th_build_dirs(build, root);
    th_mktemp(tmp, sizeof tmp, "fl_install");
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    /* a child make must not join the jobserver of a `make test` above this test */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory install NOBUILD=1 "
             "BUILD='%s' PREFIX='%s'",
             root, build, prefix);
    run_ok("make install", cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "grep -o -- '-fsanitize=[^ ]*' '%s/.flags' | tr '\\n' ' '", build);
    if (run(cmd, san, sizeof san) > 1) TFAIL("cannot read %s/.flags", build);
    if (san[0]) printf("  (sanitizer build: the outside program is built with %s)\n", san);
}

static void cleanup(void) { th_rmtree(tmp); }

/* The outside program's two lines: the version and a falling cost. */
static void check_embed_output(const char *out)
{
    char want[64];
    snprintf(want, sizeof want, "fleet %s\n", fl_version());
    CHECK_STR_HAS(out, want);
    CHECK_STR_HAS(out, " falls");
}

TEST(install_tree_has_tools_pc_and_cmake_package)
{
    install();
    static const char *const files[] = {"include/fleet.h",
                                        "include/fleet/base.h",
                                        "include/fleet/fleet.h",
                                        "lib/libfleet.a",
                                        "lib/libfleet.so",
                                        "lib/libfleet.so.0",
                                        "lib/libfleet.so." FLEET_VERSION_STRING,
                                        "bin/fleetrun",
                                        "bin/fleet-datagen",
                                        "bin/fleet-lightning",
                                        "lib/pkgconfig/fleet.pc",
                                        "lib/cmake/Fleet/FleetConfig.cmake",
                                        "lib/cmake/Fleet/FleetConfigVersion.cmake"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!exists(files[i])) TFAIL("%s/%s was not installed", prefix, files[i]);
    char cmd[12288], out[16384];
    /* every tool built is installed; each but fleetrun (which has its own owner) has --version */
    snprintf(cmd, sizeof cmd,
             "cd '%s/tools' && for t in *; do [ -f \"$t\" ] && [ -x \"$t\" ] || continue; "
             "cmp -s \"$t\" '%s/bin/'\"$t\" || { echo \"bin/$t missing or different\"; exit 1; }; "
             "[ \"$t\" = fleetrun ] && continue; v=$('%s/bin/'\"$t\" --version) || exit 1; "
             "[ \"$v\" = \"$t %s\" ] || { echo \"$t --version printed '$v'\"; exit 1; }; echo \"$v\"; done",
             build, prefix, prefix, fl_version());
    run_ok("the installed tools", cmd, out, sizeof out);
    CHECK_STR_HAS(out, "fleet-datagen " FLEET_VERSION_STRING);
    CHECK_STR_HAS(out, "fleet-lightning " FLEET_VERSION_STRING);
    CHECK(!strcmp(fl_version(), FLEET_VERSION_STRING));
    /* downstream flags never carry -Werror */
    snprintf(cmd, sizeof cmd, "cat '%s/lib/pkgconfig/fleet.pc' '%s/lib/cmake/Fleet/'*.cmake", prefix, prefix);
    run_ok("reading the package files", cmd, out, sizeof out);
    if (strstr(out, "-Werror")) TFAIL("the installed package files pass -Werror to downstream builds");
    snprintf(cmd, sizeof cmd, "PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config --modversion fleet", prefix);
    run_ok("pkg-config --modversion fleet", cmd, out, sizeof out);
    CHECK_STR_HAS(out, fl_version());
    cleanup();
}

TEST(outside_program_builds_with_pkg_config)
{
    install();
    char cmd[12288], out[16384];
    snprintf(cmd, sizeof cmd,
             "export PKG_CONFIG_PATH='%s/lib/pkgconfig'; cc -std=c11 %s '%s/tests/cmake/embed.c' -o '%s/embed' "
             "$(pkg-config --cflags --libs fleet) && LD_LIBRARY_PATH='%s/lib' '%s/embed'",
             prefix, san, root, tmp, prefix, tmp);
    run_ok("building and running embed.c with pkg-config", cmd, out, sizeof out);
    check_embed_output(out);
    /* the shared library it ran with is the installed one */
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s/lib' ldd '%s/embed' | grep libfleet", prefix, tmp);
    run_ok("ldd embed", cmd, out, sizeof out);
    CHECK_STR_HAS(out, prefix);
    cleanup();
}

TEST(outside_program_builds_with_cmake)
{
    install();
    char cmd[12288], out[32768];
    if (run("command -v cmake", out, sizeof out) != 0)
        TFAIL("cmake is not installed (it is in the test profile: scripts/ensure-deps.sh test)");
    snprintf(cmd, sizeof cmd,
             "cmake -S '%s/tests/cmake' -B '%s/cb' -DCMAKE_PREFIX_PATH='%s' -DCMAKE_BUILD_TYPE=Release "
             "-DCMAKE_C_FLAGS='%s' -DCMAKE_EXE_LINKER_FLAGS='%s' && cmake --build '%s/cb'",
             root, tmp, prefix, san, san, tmp);
    run_ok("configuring and building tests/cmake with find_package(Fleet)", cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "'%s/cb/embed'", tmp);
    run_ok("running embed (Fleet::fleet)", cmd, out, sizeof out);
    check_embed_output(out);
    snprintf(cmd, sizeof cmd, "'%s/cb/embed_static'", tmp);
    run_ok("running embed_static (Fleet::fleet_static)", cmd, out, sizeof out);
    check_embed_output(out);
    cleanup();
}

TEST_MAIN(T(install_tree_has_tools_pc_and_cmake_package), T(outside_program_builds_with_pkg_config),
          T(outside_program_builds_with_cmake))
