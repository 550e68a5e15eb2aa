/* test_fleet.c - role makers, DistributedStrategy, the facade's queries and file splits.
 * Each case runs in its own process, so it may change the environment freely. */
#include "testhelp.h"

static void clear_env(void)
{
    /* Paddle's variables, and those of the other launchers fleet_init(NULL, ...) looks for
     * (so the tests pass when run inside an srun step or a torchrun job) */
    const char *vars[] = {"PADDLE_TRAINER_ID",
                          "PADDLE_TRAINER_ENDPOINTS",
                          "PADDLE_CURRENT_ENDPOINT",
                          "PADDLE_TRAINERS_NUM",
                          "PADDLE_TRAINING_ROLE",
                          "TRAINING_ROLE",
                          "PADDLE_PSERVERS_IP_PORT_LIST",
                          "POD_IP",
                          "PADDLE_PORT",
                          "RANK",
                          "WORLD_SIZE",
                          "OMPI_COMM_WORLD_SIZE",
                          "SLURM_PROCID",
                          "SLURM_STEP_ID",
                          "SLURM_STEPID",
                          "PMI_SIZE",
                          "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

TEST(fallback_is_one_local_worker)
{
    clear_env();
    fleet_t *f = fleet_init(NULL, NULL);
    CHECK(f);
    CHECK(!fleet_is_distributed(f));
    CHECK(fleet_is_worker(f) && !fleet_is_server(f) && fleet_is_first_worker(f));
    CHECK_EQ_INT(fleet_worker_num(f), 1);
    CHECK_EQ_INT(fleet_server_num(f), 0);
    fleet_free(f);
    f = fleet_init_collective(NULL, NULL);
    CHECK(f && fleet_is_collective(f) && !fleet_is_distributed(f) && fleet_worker_num(f) == 1);
    fleet_free(f);
}

TEST(collective_env)
{
    clear_env();
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171,127.0.0.1:6172", 1);
    setenv("PADDLE_TRAINER_ID", "2", 1);
    setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6172", 1);
    setenv("PADDLE_TRAINERS_NUM", "3", 1);
    fleet_t *f = fleet_init_collective(NULL, NULL);
    CHECK(f);
    CHECK(fleet_is_distributed(f) && !fleet_is_first_worker(f));
    CHECK_EQ_INT(fleet_worker_index(f), 2);
    CHECK_EQ_INT(fleet_worker_num(f), 3);
    CHECK(!strcmp(fleet_worker_endpoint(f, 1), "127.0.0.1:6171"));
    CHECK(!strcmp(fleet_worker_endpoints_str(f), "127.0.0.1:6170,127.0.0.1:6171,127.0.0.1:6172"));
    fleet_free(f);
}

static void expect_env_error(int collective, const char *sub)
{
    fleet_role *r = NULL;
    CHECK(fleet_role_paddlecloud(collective, &r) == FL_EINVAL);
    CHECK(r == NULL);
    CHECK_STR_HAS(fl_last_error(), sub);
}

TEST(collective_env_errors)
{
    clear_env();
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1", 1);
    expect_env_error(1, "PADDLE_TRAINER_ENDPOINTS: endpoint '127.0.0.1' is malformed: expected host:port");
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:99999", 1);
    expect_env_error(1, "invalid port");
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,,127.0.0.1:6171", 1);
    expect_env_error(1, "empty entry");
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171", 1);
    setenv("PADDLE_TRAINER_ID", "2", 1);
    expect_env_error(1, "PADDLE_TRAINER_ID='2' is invalid: expected an integer in [0, 1]");
    setenv("PADDLE_TRAINER_ID", "one", 1);
    expect_env_error(1, "PADDLE_TRAINER_ID='one' is invalid");
    setenv("PADDLE_TRAINER_ID", "1", 1);
    setenv("PADDLE_TRAINERS_NUM", "3", 1);
    expect_env_error(1, "PADDLE_TRAINERS_NUM=3 does not match the 2 endpoints");
    unsetenv("PADDLE_TRAINERS_NUM");
    setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6170", 1);
    expect_env_error(1, "PADDLE_CURRENT_ENDPOINT='127.0.0.1:6170' is not trainer 1's endpoint");
    unsetenv("PADDLE_CURRENT_ENDPOINT");
    setenv("PADDLE_TRAINING_ROLE", "PSERVER", 1);
    expect_env_error(1, "PADDLE_TRAINING_ROLE='PSERVER' is invalid");
}

TEST(ps_env_worker_and_server)
{
    clear_env();
    setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:6000,127.0.0.1:6001", 1);
    setenv("TRAINING_ROLE", "TRAINER", 1);
    setenv("PADDLE_TRAINERS_NUM", "4", 1);
    setenv("PADDLE_TRAINER_ID", "3", 1);
    fleet_t *f = fleet_init(NULL, NULL);
    CHECK(f && fleet_is_worker(f) && fleet_worker_index(f) == 3 && fleet_worker_num(f) == 4 && fleet_server_num(f) == 2);
    CHECK(!strcmp(fleet_server_endpoint(f, 1), "127.0.0.1:6001"));
    fleet_free(f);
    setenv("TRAINING_ROLE", "PSERVER", 1);
    setenv("POD_IP", "127.0.0.1", 1);
    setenv("PADDLE_PORT", "6001", 1);
    f = fleet_init(NULL, NULL);
    CHECK(f && fleet_is_server(f) && fleet_server_index(f) == 1);
    fleet_free(f);
}

TEST(ps_env_errors)
{
    clear_env();
    setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:6000", 1);
    expect_env_error(0, "environment variable TRAINING_ROLE is not set: expected TRAINER or PSERVER");
    setenv("TRAINING_ROLE", "WORKER", 1);
    expect_env_error(0, "PADDLE_TRAINERS_NUM is not set");
    setenv("PADDLE_TRAINERS_NUM", "2", 1);
    expect_env_error(0, "TRAINING_ROLE='WORKER' is invalid: expected TRAINER or PSERVER");
    setenv("TRAINING_ROLE", "TRAINER", 1);
    expect_env_error(0, "PADDLE_TRAINER_ID is not set");
    setenv("PADDLE_TRAINER_ID", "5", 1);
    expect_env_error(0, "PADDLE_TRAINER_ID='5' is invalid");
    setenv("TRAINING_ROLE", "PSERVER", 1);
    expect_env_error(0, "POD_IP is not set");
    setenv("POD_IP", "127.0.0.1", 1);
    expect_env_error(0, "PADDLE_PORT is not set");
    setenv("PADDLE_PORT", "70000", 1);
    expect_env_error(0, "PADDLE_PORT='70000' is invalid");
    setenv("PADDLE_PORT", "6009", 1);
    expect_env_error(0, "'127.0.0.1:6009' is not in PADDLE_PSERVERS_IP_PORT_LIST");
    setenv("PADDLE_TRAINERS_NUM", "-1", 1);
    expect_env_error(0, "PADDLE_TRAINERS_NUM='-1' is invalid");
    /* fleet_init reports the same error and returns NULL */
    CHECK(fleet_init(NULL, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(), "PADDLE_TRAINERS_NUM");
}

/* fleetrun --nproc_per_node 2 of a parameter-server program: refused at fleet_init instead
 * of two processes each training a local copy */
TEST(ps_program_started_as_collective_job)
{
    clear_env();
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171", 1);
    setenv("PADDLE_TRAINER_ID", "1", 1);
    setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6171", 1);
    setenv("PADDLE_TRAINERS_NUM", "2", 1);
    setenv("PADDLE_TRAINING_ROLE", "TRAINER", 1);
    CHECK(fleet_init(NULL, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(),
                  "this is a parameter-server program (fleet_init) but it was started as a collective job of 2 processes");
    CHECK_STR_HAS(fl_last_error(), "fleetrun --server_num S --worker_num W PROGRAM");
    CHECK_STR_HAS(fl_last_error(), "fleet_init_collective");
    /* the same variables are a valid collective job */
    fleet_t *f = fleet_init_collective(NULL, NULL);
    CHECK(f && fleet_worker_num(f) == 2 && fleet_worker_index(f) == 1);
    fleet_free(f);
    /* PADDLE_TRAINERS_NUM alone counts the processes too; one trainer is the local run */
    clear_env();
    setenv("PADDLE_TRAINERS_NUM", "3", 1);
    expect_env_error(0, "collective job of 3 processes (PADDLE_TRAINERS_NUM counts them");
    setenv("PADDLE_TRAINERS_NUM", "1", 1);
    f = fleet_init(NULL, NULL);
    CHECK(f && !fleet_is_distributed(f));
    fleet_free(f);
}

TEST(user_defined_role)
{
    const char *servers[] = {"127.0.0.1:6001", "127.0.0.1:6002"};
    fleet_user_role u = {0, 1, FLEET_ROLE_WORKER, 3, NULL, 0, servers, 2};
    fleet_role *r;
    CHECK_OK(fleet_role_user_defined(&u, &r));
    fleet_t *f = fleet_init(r, NULL);
    CHECK(f && fleet_worker_index(f) == 1 && fleet_worker_num(f) == 3 && fleet_server_num(f) == 2 &&
          fleet_is_distributed(f));
    fleet_free(f);
    u.current_id = 3;
    CHECK_FAILS(fleet_role_user_defined(&u, &r), FL_EINVAL, "current_id 3 out of range [0, 3) for a worker");
    u.current_id = 0;
    u.n_server_endpoints = 0;
    CHECK_FAILS(fleet_role_user_defined(&u, &r), FL_EINVAL, "server_endpoints must be a non-empty list");
    const char *dup[] = {"127.0.0.1:6001", "127.0.0.1:6001"};
    u.server_endpoints = dup;
    u.n_server_endpoints = 2;
    CHECK_FAILS(fleet_role_user_defined(&u, &r), FL_EINVAL, "contains '127.0.0.1:6001' twice");
    u.server_endpoints = servers;
    u.role = FLEET_ROLE_SERVER;
    u.current_id = 1;
    CHECK_OK(fleet_role_user_defined(&u, &r));
    f = fleet_init(r, NULL);
    CHECK(f && fleet_is_server(f) && fleet_server_index(f) == 1);
    fleet_free(f);
    /* a collective role maker given to the PS form is refused */
    const char *workers[] = {"127.0.0.1:7001", "127.0.0.1:7002"};
    fleet_user_role c = {1, 0, FLEET_ROLE_WORKER, 0, workers, 2, NULL, 0};
    CHECK_OK(fleet_role_user_defined(&c, &r));
    f = fleet_init_collective(r, NULL);
    CHECK(f && fleet_worker_num(f) == 2);
    fleet_free(f);
}

TEST(strategy_defaults_and_set)
{
    fleet_strategy s = fleet_strategy_default();
    CHECK(s.a_sync == 1 && s.a_sync_configs.k_steps == -1 && s.a_sync_configs.send_queue_size == 0);
    CHECK(s.fuse_all_reduce_ops == 1 && s.fuse_grad_size_in_MB == 32 && s.nccl_comm_num == 1);
    CHECK(s.localsgd_configs.k_steps == 1 && s.gradient_merge_configs.avg == 1);
    CHECK(s.amp_configs.init_loss_scaling == 32768);
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.k_steps", "100"));
    CHECK_OK(fleet_strategy_set(&s, "a_sync", "true"));
    CHECK_EQ_INT(s.a_sync_configs.k_steps, 0); /* Paddle: the a_sync setter resets k_steps */
    CHECK_FAILS(fleet_strategy_set(&s, "a_synk", "true"), FL_EINVAL, "unknown strategy field 'a_synk'");
    CHECK_FAILS(fleet_strategy_set(&s, "localsgd", "yes"), FL_EINVAL, "expected true or false");
    CHECK_FAILS(fleet_strategy_set(&s, "localsgd_configs.k_steps", "0"), FL_EINVAL, "expected >= 1");
    CHECK_FAILS(fleet_strategy_set(&s, "fuse_grad_size_in_MB", "abc"), FL_EINVAL, "expected a number");
    CHECK_OK(fleet_strategy_check(&s));
}

TEST(strategy_unimplemented_rejected)
{
    fleet_strategy s = fleet_strategy_default();
    s.amp = 1;
    CHECK_OK(fleet_strategy_check(&s));
    s.amp_configs.use_pure_fp16 = 1; /* level O2 (tests/test_amp_o2.c) */
    CHECK_OK(fleet_strategy_check(&s));
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "amp_configs.dtype", "float16"));
    CHECK_OK(fleet_strategy_check(&s)); /* float16 AMP with loss scaling (tests/test_amp_fp16.c) */
    {
        /* ... with parameter servers: async (Paddle's default a_sync=true) pushes only on steps
         * whose gradients are finite (ps_send runs under the update ops' condition, after
         * the unscale); sync mode, whose servers wait for every worker's push of a step, is
         * refused by name at minimize (training: tests/test_ps_modes.c) */
        s.amp = 1;
        const char *servers[] = {"127.0.0.1:6001"};
        fleet_user_role u = {0, 0, FLEET_ROLE_WORKER, 1, NULL, 0, servers, 1};
        for (int sync = 0; sync < 2; sync++) {
            s.a_sync = !sync;
            fleet_role *r;
            CHECK_OK(fleet_role_user_defined(&u, &r));
            fleet_t *f = fleet_init(r, &s);
            CHECK(f);
            fl_prog *p = fl_prog_create();
            fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
            fl_var *loss = fl_layer_mean(fl_layer_fc(&x, 1, 1, NULL));
            CHECK(loss);
            fl_opt *o = fl_opt_sgd(0.1f);
            fl_opt *d = fleet_distributed_optimizer(f, o, NULL);
            CHECK(d);
            if (sync) {
                CHECK_FAILS(fl_opt_minimize(d, loss), FL_EUNSUPPORTED,
                            "but sync mode's servers wait for every worker's push");
            } else {
                CHECK_OK(fl_opt_minimize(d, loss));
                char *t = NULL;
                size_t n = 0;
                CHECK_OK(fl_prog_to_text(p, &t, &n));
                CHECK_STR_HAS(t, "op ps_send role=optimize cond=find_infinite_scale.all_finite");
                CHECK(strstr(t, "op check_finite_and_unscale") < strstr(t, "op ps_send"));
                free(t);
            }
            fl_opt_free(o);
            fl_prog_free(p);
            fleet_free(f);
        }
        s.a_sync = 1;
        s.amp = 0;
    }
    CHECK_OK(fleet_strategy_set(&s, "amp_configs.dtype", "bf8"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "'amp_configs.dtype' = 'bf8' is invalid");
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&s, "{\"amp\": true, \"amp_configs\": {\"custom_white_list\": [\"fc\", \"mul\"], "
                                      "\"custom_black_list\": \"softmax\", \"dtype\": \"bfloat16\"}}"));
    CHECK(s.amp == 1);
    CHECK(!strcmp(s.amp_configs.custom_white_list, "fc,mul") && !strcmp(s.amp_configs.custom_black_list, "softmax"));
    char *text = fleet_strategy_to_text(&s);
    CHECK_STR_HAS(text, "amp_configs.custom_white_list=fc,mul\n");
    free(text);
    s = fleet_strategy_default();
    s.pipeline = 1;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EUNSUPPORTED, "pipeline parallelism is not implemented");
    s = fleet_strategy_default();
    s.nccl_comm_num = 2;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EUNSUPPORTED, "nccl_comm_num");
    s = fleet_strategy_default();
    s.localsgd = s.gradient_merge = 1;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "cannot be combined");
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "allreduce_dtype", "bfloat16"));
    CHECK_OK(fleet_strategy_check(&s));
    CHECK_OK(fleet_strategy_set(&s, "allreduce_dtype", "int8"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "'allreduce_dtype' = 'int8' is invalid");
    /* fleet_desc_configs: the sparse table class and what an SSD class needs */
    s = fleet_strategy_default();
    CHECK(!strcmp(s.fleet_desc_configs.sparse_table_class, "DownpourSparseTable"));
    CHECK_OK(fleet_strategy_set(&s, "fleet_desc_configs.sparse_table_class", "DownpourSparseSSDTable"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "needs fleet_desc_configs.sparse_ssd_path");
    CHECK_OK(fleet_strategy_set(&s, "fleet_desc_configs.sparse_ssd_path", "/tmp/ssd"));
    CHECK_OK(fleet_strategy_set(&s, "fleet_desc_configs.sparse_mem_budget_mb", "64"));
    CHECK_OK(fleet_strategy_check(&s));
    CHECK_OK(fleet_strategy_set(&s, "fleet_desc_configs.sparse_table_class", "MemorySparseTable"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "apply to an SSD table class");
    CHECK_OK(fleet_strategy_set(&s, "fleet_desc_configs.sparse_table_class", "HashTable"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "'fleet_desc_configs.sparse_table_class' = 'HashTable' is invalid");
    CHECK_FAILS(fleet_strategy_set(&s, "fleet_desc_configs.sparse_mem_budget_mb", "-1"), FL_EINVAL, "expected >= 0");
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&s, "{\"fleet_desc_configs\": {\"sparse_table_class\": \"SSDSparseTable\", "
                                      "\"sparse_ssd_path\": \"/data/ssd\", \"sparse_mem_budget_mb\": 4096}}"));
    CHECK_OK(fleet_strategy_check(&s));
    CHECK(!strcmp(s.fleet_desc_configs.sparse_ssd_path, "/data/ssd") && s.fleet_desc_configs.sparse_mem_budget_mb == 4096);
}

TEST(strategy_parse_text_and_json)
{
    fleet_strategy s = fleet_strategy_default();
    CHECK_OK(
        fleet_strategy_parse(&s, "# comment\nlocalsgd = true\nlocalsgd_configs.k_steps=4\n\nfuse_grad_size_in_MB=16.5\n"));
    CHECK(s.localsgd == 1 && s.localsgd_configs.k_steps == 4 && s.fuse_grad_size_in_MB == 16.5);
    fleet_strategy j = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&j,
                                  "{\"a_sync\": true, \"a_sync_configs\": {\"k_steps\": 100, \"max_merge_var_num\": 4},\n"
                                  " \"gradient_merge\": false}"));
    CHECK(j.a_sync == 1 && j.a_sync_configs.k_steps == 100 && j.a_sync_configs.max_merge_var_num == 4);
    fleet_strategy e = fleet_strategy_default();
    CHECK_FAILS(fleet_strategy_parse(&e, "localsgd=true\nbogus=1\n"), FL_EINVAL,
                "strategy line 2: unknown strategy field 'bogus'");
    CHECK(e.localsgd == 0); /* all-or-nothing */
    CHECK_FAILS(fleet_strategy_parse(&e, "{\"a_sync_configs\": {\"k_stepz\": 1}}"), FL_EINVAL, "'a_sync_configs.k_stepz'");
    CHECK_FAILS(fleet_strategy_parse(&e, "{\"a_sync\": true"), FL_EINVAL,
                "strategy JSON: invalid JSON: it ends early or is malformed at its last byte (byte 14, line 1)");
    CHECK_FAILS(fleet_strategy_parse(&e, "localsgd"), FL_EINVAL, "is not key=value");
    char *t = fleet_strategy_to_text(&s);
    CHECK_STR_HAS(t, "localsgd=true\n");
    CHECK_STR_HAS(t, "localsgd_configs.k_steps=4\n");
    fleet_strategy r = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&r, t));
    CHECK(memcmp(&r, &s, sizeof r) == 0);
    free(t);
    char dir[64], path[96];
    th_mktemp(dir, sizeof dir, "fleet_strategy_");
    snprintf(path, sizeof path, "%s/strategy.txt", dir);
    th_write_bytes(path, "gradient_merge=true\n", 20);
    fleet_strategy l = fleet_strategy_default();
    CHECK_OK(fleet_strategy_load(&l, path));
    CHECK(l.gradient_merge == 1);
    th_rmtree(dir);
    CHECK_FAILS(fleet_strategy_load(&l, "/nonexistent/strategy.txt"), FL_EIO, "/nonexistent/strategy.txt");
}

/* Writes text to path (a new or truncated file). */
static void strategy_file(const char *path, const char *text) { th_write_bytes(path, text, strlen(text)); }

TEST(strategy_json_errors_name_the_file_and_key)
{
    char dir[64], path[96], want[160];
    th_mktemp(dir, sizeof dir, "fleet_strategy_");
    snprintf(path, sizeof path, "%s/strategy", dir);
    fleet_strategy s = fleet_strategy_default(), before = s;
    /* a file cut short */
    strategy_file(path, "{\n  \"a_sync\": false,\n  \"a_sync_configs\": {\"k_steps\": 10");
    CHECK_FAILS(fleet_strategy_load(&s, path), FL_EINVAL,
                "it ends early or is malformed at its last byte (byte 54, line 3)");
    snprintf(want, sizeof want, "'%s': invalid JSON", path);
    CHECK_STR_HAS(fl_last_error(), want);
    unlink(path);
    /* a syntax error is placed by byte and line */
    strategy_file(path, "{\"a_sync\": false,\n \"localsgd\" true}");
    CHECK_FAILS(fleet_strategy_load(&s, path), FL_EINVAL, "invalid JSON at byte 30 (line 2): 'true}'");
    CHECK_STR_HAS(fl_last_error(), path);
    unlink(path);
    /* wrong types */
    const char *cases[][2] = {
        {"{\"a_sync_configs\": {\"k_steps\": \"100\"}}", "key 'a_sync_configs.k_steps' must be an integer"},
        {"{\"a_sync_configs\": {\"k_steps\": 2.5}}", "key 'a_sync_configs.k_steps' must be an integer, not 2.5"},
        {"{\"a_sync\": 1}", "key 'a_sync' must be true or false"},
        {"{\"fuse_grad_size_in_MB\": null}", "key 'fuse_grad_size_in_MB' must be a number"},
        {"{\"a_sync_configs\": [1]}", "key 'a_sync_configs' must be an object"},
        {"{\"a_sync_configs\": {\"max_merge_var_num\": -1}}",
         "key 'a_sync_configs.max_merge_var_num' must be a non-negative integer, not -1"},
        {"{\"a_sync_configs\": {\"send_queue_size\": 4294967296}}", "key 'a_sync_configs.send_queue_size' is too large"},
        {"{\"fuse_grad_size_in_MB\": 1e999}", "key 'fuse_grad_size_in_MB' is too large for a double"},
        {"{\"bogus\": {}}", "unknown strategy field 'bogus'"},
        {"{\"a_sync\": true} {}", "unexpected data after the JSON value at byte 17 (line 1): '{}'"},
        {"{\"a_sync\": \"tr\\u0000ue\"}", "escape \\u0000 (NUL) at byte 14 (line 1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strategy_file(path, cases[i][0]);
        CHECK_FAILS(fleet_strategy_load(&s, path), FL_EINVAL, cases[i][1]);
        snprintf(want, sizeof want, "'%s': ", path);
        CHECK_STR_HAS(fl_last_error(), want);
        CHECK(memcmp(&s, &before, sizeof s) == 0); /* all-or-nothing */
        unlink(path);
    }
    /* key=value files name the file too */
    strategy_file(path, "a_sync = maybe\n");
    CHECK_FAILS(fleet_strategy_load(&s, path), FL_EINVAL, "strategy line 1: strategy field 'a_sync'='maybe' is invalid");
    CHECK_STR_HAS(fl_last_error(), path);
    unlink(path);
    /* document order: setting a_sync after k_steps resets it, as Paddle's setter does */
    CHECK_OK(fleet_strategy_parse(&s, "{\"a_sync_configs\": {\"k_steps\": 7}, \"a_sync\": true}"));
    CHECK_EQ_INT(s.a_sync_configs.k_steps, 0);
    CHECK_OK(fleet_strategy_parse(&s, "{\"a_sync\": true, \"a_sync_configs\": {\"k_steps\": 7}}"));
    CHECK_EQ_INT(s.a_sync_configs.k_steps, 7);
    th_rmtree(dir);
}

TEST(split_files_as_paddle)
{
    const char *files[] = {"a", "b", "c", "d", "e"};
    const char *workers[] = {"127.0.0.1:7001", "127.0.0.1:7002"};
    const char *want[2][3] = {{"a", "b", "c"}, {"d", "e", NULL}};
    for (int id = 0; id < 2; id++) {
        fleet_user_role c = {1, id, FLEET_ROLE_WORKER, 0, workers, 2, NULL, 0};
        fleet_role *r;
        CHECK_OK(fleet_role_user_defined(&c, &r));
        fleet_t *f = fleet_init_collective(r, NULL);
        const char **out;
        int n;
        CHECK_OK(fleet_split_files(f, files, 5, &out, &n));
        CHECK_EQ_INT(n, id == 0 ? 3 : 2);
        for (int i = 0; i < n; i++) CHECK(!strcmp(out[i], want[id][i]));
        free(out);
        CHECK_OK(fleet_split_files(f, files, 1, &out, &n));
        CHECK_EQ_INT(n, id == 0 ? 1 : 0);
        free(out);
        fleet_free(f);
    }
}

/* fleet_layer_allreduce and fleet_layer_allgather on one local worker are the input; fleet_transpile wants a
 * parameter-server fleet (the multi-process runs: tests/python/test_transpiler.py,
 * test_collective_ops.py) */
TEST(program_allreduce_and_transpile_on_a_local_fleet)
{
    clear_env();
    fleet_t *f = fleet_init(NULL, NULL);
    CHECK(f);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0); /* [-1, 3] */
    fl_var *y = fleet_layer_allreduce(f, x, "max");
    CHECK(y);
    CHECK_EQ_INT(fl_var_ndim(y), 2);
    CHECK(!fleet_layer_allreduce(f, x, "prod"));
    CHECK_STR_HAS(fl_last_error(), "fleet_layer_allreduce: reduce_type 'prod' is invalid");
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xs[6] = {1, 2, 3, 4, 5, 6};
    fl_tensor *xt = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){2, 3}, xs), *out[1];
    fl_feed feed[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(y)};
    CHECK_OK(fl_exe_run(e, p, feed, 1, fetch, 1, out));
    for (int i = 0; i < 6; i++) CHECK(fl_tensor_f32(out[0])[i] == xs[i]);
    fl_var *g = fleet_layer_allgather(f, x);
    CHECK(g);
    const char *gfetch[] = {fl_var_name(g)};
    CHECK_OK(fl_exe_run(e, p, feed, 1, gfetch, 1, out));
    CHECK_EQ_INT(fl_tensor_dim(out[0], 0), 2);
    for (int i = 0; i < 6; i++) CHECK(fl_tensor_f32(out[0])[i] == xs[i]);
    fl_var *pred = fl_layer_fc(&x, 1, 1, NULL);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, fl_layer_mean(pred)));
    CHECK_FAILS(fleet_transpile(f, o, p, NULL), FL_EUNSUPPORTED, "fleet_transpile: this fleet's role is collective");
    CHECK_FAILS(fleet_transpile(f, o, NULL, NULL), FL_EINVAL, "fleet_transpile: prog is NULL");
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
}

TEST_MAIN(T(fallback_is_one_local_worker), T(collective_env), T(collective_env_errors), T(ps_env_worker_and_server),
          T(ps_env_errors), T(ps_program_started_as_collective_job), T(user_defined_role), T(strategy_defaults_and_set),
          T(strategy_unimplemented_rejected), T(strategy_parse_text_and_json),
          T(strategy_json_errors_name_the_file_and_key), T(split_files_as_paddle),
          T(program_allreduce_and_transpile_on_a_local_fleet))
