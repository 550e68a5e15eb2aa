/*
 * datagen_text.h - the text subcommands of fleet-datagen (included by tools/fleet-datagen.c
 * after its random-number and file helpers, which it uses):
 *
 *   fleet-datagen simnet --rows N --out DIR [--test-rows M] [--files K] [--seed S]
 *                        [--topics T] [--topic-words W] [--background B] [--purity P] [--mix X]
 *   fleet-datagen word2vec --sentences N --out DIR [--files K] [--seed S] [--topics T]
 *                        [--topic-words W] [--roles R] [--role-words Q] [--background B]
 *                        [--length L]
 *
 * simnet: query / positive title / negative title triples as MultiSlot lines of word ids
 * (per slot `n id...`).  Every text has a topic; each of its words comes from its topic's W
 * words with probability P, from the words of the other topics with probability X, else
 * from B background words.  The positive title shares the query's topic, the negative one
 * has another.  The best reachable order rate is that of the Bayes score
 * sum_t P(t | query) P(t | title), which decides each pair exactly as the posterior does;
 * it is computed on the rows written and printed (ties count 1/2).
 *
 * word2vec: a text corpus (one sentence per line) and its dict (`word count`, by count),
 * with T topic clusters of W words (a topic sentence draws 75% of its words from one
 * topic, the rest from B Zipf-distributed background words) and, for every topic t and
 * role r of R, a word g(t, r) that appears in sentences mixing topic t's words with role
 * r's Q context words.  clusters.txt lists the topic clusters; analogies.txt every
 * g(t1, r1) g(t1, r2) g(t2, r1) g(t2, r2) with t1 != t2, r1 != r2 (a:b :: c:d).  A model
 * that learns the planted structure reaches 1.0 on both; chance levels are printed.
 */
#ifndef FLEET_DATAGEN_TEXT_H
#define FLEET_DATAGEN_TEXT_H

typedef struct {
    int topics, words, background;
    double purity, mix;
} simnet_model;

/* One text of topic t into ids; returns its length. */
static int simnet_text(const simnet_model *m, rng *g, int t, int lo, int hi, uint32_t *ids)
{
    int n = lo + (int)(rng_next(g) % (uint64_t)(hi - lo + 1));
    const int T = m->topics, W = m->words;
    for (int i = 0; i < n; i++) {
        double u = rng_unif(g);
        if (u < m->purity) {
            ids[i] = (uint32_t)(t * W + (int)(rng_next(g) % (uint64_t)W));
        } else if (u < m->purity + m->mix && T > 1) {
            int o = (int)(rng_next(g) % (uint64_t)(T - 1));
            o += o >= t;
            ids[i] = (uint32_t)(o * W + (int)(rng_next(g) % (uint64_t)W));
        } else {
            ids[i] = (uint32_t)(T * W + (int)(rng_next(g) % (uint64_t)m->background));
        }
    }
    return n;
}

/* Posterior over topics of a text (post[T]). */
static void simnet_posterior(const simnet_model *m, const uint32_t *ids, int n, double *post)
{
    const int T = m->topics, W = m->words;
    double own = log(m->purity / W), other = T > 1 && m->mix > 0 ? log(m->mix / ((double)(T - 1) * W)) : -1e300;
    double mx = -INFINITY;
    for (int t = 0; t < T; t++) {
        double l = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] < (uint32_t)(T * W)) l += (int)(ids[i] / (uint32_t)W) == t ? own : other;
        post[t] = l;
        if (l > mx) mx = l;
    }
    double z = 0;
    for (int t = 0; t < T; t++) z += (post[t] = exp(post[t] - mx));
    for (int t = 0; t < T; t++) post[t] /= z;
}

static char *put_ids(char *w, const uint32_t *ids, int n)
{
    w = put_int(w, n);
    for (int i = 0; i < n; i++) *w++ = ' ', w = put_int(w, ids[i]);
    return w;
}

/* Writes rows of a split into files part files; returns the Bayes order rate. */
static double simnet_split(const simnet_model *m, uint64_t seed, int split, const char *dir, int64_t rows, int files)
{
    char *buf = xmalloc(OUT_BUF), path[4096], tmp[4100];
    double *pq = xmalloc((size_t)m->topics * 3 * sizeof *pq), *pp = pq + m->topics, *pn = pp + m->topics, score = 0;
    for (int f = 0; f < files; f++) {
        int64_t r0 = rows * f / files, r1 = rows * (f + 1) / files;
        snprintf(path, sizeof path, "%s/part-%05d", dir, f);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        int fd = open_tmp(tmp);
        size_t len = 0;
        uint64_t stream = hash3(seed, (uint64_t)split, 7);
        for (int64_t i = r0; i < r1; i++) {
            rng g = {fmix64(stream + (uint64_t)i * GOLDEN)};
            int t = (int)(rng_next(&g) % (uint64_t)m->topics);
            int o = m->topics > 1 ? (int)(rng_next(&g) % (uint64_t)(m->topics - 1)) : 0;
            o += o >= t && m->topics > 1;
            uint32_t q[8], p[16], n[16];
            int nq = simnet_text(m, &g, t, 2, 6, q), np = simnet_text(m, &g, t, 4, 12, p);
            int nn = simnet_text(m, &g, o, 4, 12, n);
            simnet_posterior(m, q, nq, pq);
            simnet_posterior(m, p, np, pp);
            simnet_posterior(m, n, nn, pn);
            double sp = 0, sn = 0;
            for (int k = 0; k < m->topics; k++) sp += pq[k] * pp[k], sn += pq[k] * pn[k];
            score += sp > sn ? 1.0 : sp == sn ? 0.5 : 0.0;
            char *w = buf + len;
            w = put_ids(w, q, nq), *w++ = ' ';
            w = put_ids(w, p, np), *w++ = ' ';
            w = put_ids(w, n, nn), *w++ = '\n';
            len = (size_t)(w - buf);
            if (len > OUT_BUF - LINE_MAX_BYTES) write_all(fd, buf, len, tmp), len = 0;
        }
        write_all(fd, buf, len, tmp);
        close_rename(fd, tmp, path);
    }
    free(buf);
    free(pq);
    return rows ? score / (double)rows : NAN;
}

static double parse_real(const char *opt, const char *v, double lo, double hi)
{
    char *end = NULL;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= lo && x <= hi)) cli_die(2, "%s expects a number in [%g, %g], got '%s'", opt, lo, hi, v);
    return x;
}

static void write_text(const char *path, const char *text, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open_tmp(tmp);
    write_all(fd, text, n, tmp);
    close_rename(fd, tmp, path);
}

static int datagen_simnet(int argc, char **argv)
{
    int64_t rows = -1, test_rows = -1;
    int files = 1;
    uint64_t seed = 1;
    const char *out = NULL;
    simnet_model m = {20, 50, 200, 0.6, 0.2};
    static const struct option longopts[] = {{"rows", required_argument, NULL, 0},
                                             {"files", required_argument, NULL, 1},
                                             {"out", required_argument, NULL, 2},
                                             {"test-rows", required_argument, NULL, 3},
                                             {"seed", required_argument, NULL, 5},
                                             {"topics", required_argument, NULL, 6},
                                             {"topic-words", required_argument, NULL, 7},
                                             {"background", required_argument, NULL, 8},
                                             {"purity", required_argument, NULL, 9},
                                             {"mix", required_argument, NULL, 10},
                                             {0}};
    char name[64];
    const char *v;
    cli_begin(2);
    for (;;) {
        int k = cli_next(argc, argv, "", longopts, name, &v);
        if (k == -1 && !name[0] && optind >= argc) break;
        if (k == -1 && !name[0]) snprintf(name, sizeof name, "%.63s", argv[optind]);
        if (k == -1 || k == '?')
            cli_die(2,
                    "unknown option '%s' (simnet options: --rows N --out DIR --test-rows M --files K --seed S "
                    "--topics T --topic-words W --background B --purity P --mix X)",
                    name);
        switch (k) {
        case 0: rows = (int64_t)parse_num(name, v, 1, MAX_ROWS); break;
        case 1: files = (int)parse_num(name, v, 1, MAX_FILES); break;
        case 2:
            if (!*v) cli_die(2, "--out expects a directory, got an empty string");
            out = v;
            break;
        case 3: test_rows = (int64_t)parse_num(name, v, 0, MAX_ROWS); break;
        case 6: m.topics = (int)parse_num(name, v, 2, 100000); break;
        case 7: m.words = (int)parse_num(name, v, 1, 100000); break;
        case 8: m.background = (int)parse_num(name, v, 1, 10000000); break;
        case 9: m.purity = parse_real(name, v, 0.01, 1); break;
        case 10: m.mix = parse_real(name, v, 0, 0.99); break;
        default: seed = parse_num(name, v, 0, UINT64_MAX); break;
        }
    }
    if (rows < 0) cli_die(2, "--rows N is required (the number of training triples)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (m.purity + m.mix > 1) cli_die(2, "--purity %g plus --mix %g exceeds 1", m.purity, m.mix);
    if (test_rows < 0) test_rows = rows / 5;
    size_t olen = strlen(out) + 32;
    char *train_dir = xmalloc(olen), *test_dir = xmalloc(olen), *json = xmalloc(olen);
    snprintf(train_dir, olen, "%s/train", out);
    snprintf(test_dir, olen, "%s/test", out);
    snprintf(json, olen, "%s/planted.json", out);
    mkdirs(train_dir);
    mkdirs(test_dir);
    double c_train = simnet_split(&m, seed, 0, train_dir, rows, files);
    double c_test = simnet_split(&m, seed, 1, test_dir, test_rows, 1);
    remove_stale(train_dir, files), remove_stale(test_dir, 1);
    int64_t dict = (int64_t)m.topics * m.words + m.background;
    char a_tr[32], a_te[32], j[1024];
    fmt_num(a_tr, sizeof a_tr, c_train, 6, "null");
    fmt_num(a_te, sizeof a_te, c_test, 6, "null");
    int jn = snprintf(j, sizeof j,
                      "{\"format\":\"simnet\",\"rows\":%lld,\"test_rows\":%lld,\"files\":%d,\"seed\":%llu,"
                      "\"dict_dim\":%lld,\"topics\":%d,\"topic_words\":%d,\"background\":%d,\"purity\":%g,\"mix\":%g,"
                      "\"ceiling_order_rate_train\":%s,\"ceiling_order_rate_test\":%s}\n",
                      (long long)rows, (long long)test_rows, files, (unsigned long long)seed, (long long)dict, m.topics,
                      m.words, m.background, m.purity, m.mix, a_tr, a_te);
    write_text(json, j, (size_t)jn);
    fmt_num(a_tr, sizeof a_tr, c_train, 4, "n/a");
    fmt_num(a_te, sizeof a_te, c_test, 4, "n/a");
    printf("fleet-datagen simnet: seed %llu, dict_dim %lld (%d topics x %d words + %d background)\n",
           (unsigned long long)seed, (long long)dict, m.topics, m.words, m.background);
    printf("  train %10lld triples %5d file%s  ceiling order rate %s  -> %s\n", (long long)rows, files,
           files == 1 ? " " : "s", a_tr, train_dir);
    printf("  test  %10lld triples     1 file   ceiling order rate %s  -> %s\n", (long long)test_rows, a_te, test_dir);
    free(train_dir), free(test_dir), free(json);
    return 0;
}

/* ---- word2vec ---------------------------------------------------------------------------- */

typedef struct {
    int topics, words, roles, role_words, background, length;
    int nwords;     /* all words: background, topic, role, grid */
    uint32_t *name; /* word index -> the number in its name w<number> */
    double *zipf;   /* cumulative background distribution */
} w2v_model;

static int w2v_topic_word(const w2v_model *m, int t, int j) { return m->background + t * m->words + j; }
static int w2v_role_word(const w2v_model *m, int r, int j)
{
    return m->background + m->topics * m->words + r * m->role_words + j;
}
static int w2v_grid_word(const w2v_model *m, int t, int r)
{
    return m->background + m->topics * m->words + m->roles * m->role_words + t * m->roles + r;
}

static int w2v_background(const w2v_model *m, rng *g)
{
    double u = rng_unif(g);
    int lo = 0, hi = m->background - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->zipf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* One sentence into w[]; returns its length. */
static int w2v_sentence(const w2v_model *m, rng *g, int *w)
{
    int n = m->length / 2 + (int)(rng_next(g) % (uint64_t)(m->length / 2 + 1));
    int t = (int)(rng_next(g) % (uint64_t)m->topics), r = (int)(rng_next(g) % (uint64_t)m->roles);
    int grid = rng_unif(g) < 0.5;
    for (int i = 0; i < n; i++) {
        double u = rng_unif(g);
        if (!grid) w[i] = u < 0.75 ? w2v_topic_word(m, t, (int)(rng_next(g) % (uint64_t)m->words)) : w2v_background(m, g);
        else if (u < 0.25) w[i] = w2v_grid_word(m, t, r);
        else if (u < 0.55) w[i] = w2v_topic_word(m, t, (int)(rng_next(g) % (uint64_t)m->words));
        else if (u < 0.85) w[i] = w2v_role_word(m, r, (int)(rng_next(g) % (uint64_t)m->role_words));
        else w[i] = w2v_background(m, g);
    }
    return n;
}

static int64_t *w2v_counts_sort_key; /* qsort has no user pointer: set around the one call */
static int w2v_by_count(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int64_t cx = w2v_counts_sort_key[x], cy = w2v_counts_sort_key[y];
    return cx != cy ? (cx < cy ? 1 : -1) : (x > y) - (x < y);
}

/* Appends "w<number>" of word k to buf. */
static char *w2v_name(const w2v_model *m, int k, char *w)
{
    *w++ = 'w';
    return put_int(w, m->name[k]);
}

static int datagen_word2vec(int argc, char **argv)
{
    int64_t sentences = -1;
    int files = 1;
    uint64_t seed = 1;
    const char *out = NULL;
    w2v_model m = {16, 8, 4, 6, 300, 12, 0, NULL, NULL};
    static const struct option longopts[] = {{"sentences", required_argument, NULL, 0},
                                             {"files", required_argument, NULL, 1},
                                             {"out", required_argument, NULL, 2},
                                             {"seed", required_argument, NULL, 5},
                                             {"topics", required_argument, NULL, 6},
                                             {"topic-words", required_argument, NULL, 7},
                                             {"roles", required_argument, NULL, 8},
                                             {"role-words", required_argument, NULL, 9},
                                             {"background", required_argument, NULL, 10},
                                             {"length", required_argument, NULL, 11},
                                             {0}};
    char name[64];
    const char *v;
    cli_begin(2);
    for (;;) {
        int k = cli_next(argc, argv, "", longopts, name, &v);
        if (k == -1 && !name[0] && optind >= argc) break;
        if (k == -1 && !name[0]) snprintf(name, sizeof name, "%.63s", argv[optind]);
        if (k == -1 || k == '?')
            cli_die(2,
                    "unknown option '%s' (word2vec options: --sentences N --out DIR --files K --seed S --topics T "
                    "--topic-words W --roles R --role-words Q --background B --length L)",
                    name);
        switch (k) {
        case 0: sentences = (int64_t)parse_num(name, v, 1, MAX_ROWS); break;
        case 1: files = (int)parse_num(name, v, 1, MAX_FILES); break;
        case 2:
            if (!*v) cli_die(2, "--out expects a directory, got an empty string");
            out = v;
            break;
        case 6: m.topics = (int)parse_num(name, v, 2, 10000); break;
        case 7: m.words = (int)parse_num(name, v, 2, 10000); break;
        case 8: m.roles = (int)parse_num(name, v, 2, 100); break;
        case 9: m.role_words = (int)parse_num(name, v, 1, 10000); break;
        case 10: m.background = (int)parse_num(name, v, 1, 1000000); break;
        case 11: m.length = (int)parse_num(name, v, 2, 200); break;
        default: seed = parse_num(name, v, 0, UINT64_MAX); break;
        }
    }
    if (sentences < 0) cli_die(2, "--sentences N is required (the corpus size in sentences)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    m.nwords = m.background + m.topics * m.words + m.roles * m.role_words + m.topics * m.roles;
    m.name = xmalloc((size_t)m.nwords * sizeof *m.name);
    rng pg = {hash3(seed, 99, 0)};
    for (int i = 0; i < m.nwords; i++) m.name[i] = (uint32_t)i;
    for (int i = m.nwords - 1; i > 0; i--) { /* names in a random order: ids say nothing */
        int j = (int)(rng_next(&pg) % (uint64_t)(i + 1));
        uint32_t x = m.name[i];
        m.name[i] = m.name[j], m.name[j] = x;
    }
    m.zipf = xmalloc((size_t)m.background * sizeof *m.zipf);
    double z = 0;
    for (int i = 0; i < m.background; i++) z += 1.0 / (i + 1);
    for (int i = 0; i < m.background; i++) m.zipf[i] = (i ? m.zipf[i - 1] : 0) + 1.0 / (i + 1) / z;
    m.zipf[m.background - 1] = 1.0;

    size_t olen = strlen(out) + 32;
    char *dir = xmalloc(olen), *path = xmalloc(olen + 16);
    snprintf(dir, olen, "%s/train", out);
    mkdirs(dir);
    int64_t *count = calloc((size_t)m.nwords, sizeof *count), tokens = 0;
    if (!count) cli_die(1, "out of memory");
    char *buf = xmalloc(OUT_BUF), tmp[4200];
    int *w = xmalloc((size_t)m.length * sizeof *w);
    for (int f = 0; f < files; f++) {
        int64_t r0 = sentences * f / files, r1 = sentences * (f + 1) / files;
        snprintf(path, olen + 16, "%s/part-%05d", dir, f);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        int fd = open_tmp(tmp);
        size_t len = 0;
        uint64_t stream = hash3(seed, 11, 0);
        for (int64_t i = r0; i < r1; i++) {
            rng g = {fmix64(stream + (uint64_t)i * GOLDEN)};
            int n = w2v_sentence(&m, &g, w);
            char *o = buf + len;
            for (int k = 0; k < n; k++) {
                if (k) *o++ = ' ';
                o = w2v_name(&m, w[k], o);
                count[w[k]]++;
            }
            *o++ = '\n';
            tokens += n;
            len = (size_t)(o - buf);
            if (len > OUT_BUF - 32 * (size_t)m.length) write_all(fd, buf, len, tmp), len = 0;
        }
        write_all(fd, buf, len, tmp);
        close_rename(fd, tmp, path);
    }
    remove_stale(dir, files);
    /* dict: words seen, by count */
    int *order = xmalloc((size_t)m.nwords * sizeof *order), nseen = 0, missing = 0;
    for (int i = 0; i < m.nwords; i++)
        if (count[i]) order[nseen++] = i;
    for (int i = m.background; i < m.nwords; i++) missing += !count[i];
    if (missing)
        cli_die(2, "%d planted words never occur in %lld sentences: give more --sentences", missing, (long long)sentences);
    w2v_counts_sort_key = count;
    qsort(order, (size_t)nseen, sizeof *order, w2v_by_count);
    w2v_counts_sort_key = NULL;
    fl_buf t = {0};
    for (int i = 0; i < nseen; i++) {
        char nm[16];
        *w2v_name(&m, order[i], nm) = 0;
        fl__buf_printf(&t, "%s %lld\n", nm, (long long)count[order[i]]);
    }
    snprintf(path, olen + 16, "%s/dict.txt", out);
    if (t.failed) cli_die(1, "out of memory");
    write_text(path, t.p, t.len);
    t.len = 0;
    for (int c = 0; c < m.topics; c++) {
        for (int j = 0; j < m.words; j++) {
            char nm[16];
            *w2v_name(&m, w2v_topic_word(&m, c, j), nm) = 0;
            fl__buf_printf(&t, "%s%s", j ? " " : "", nm);
        }
        fl__buf_printf(&t, "\n");
    }
    snprintf(path, olen + 16, "%s/clusters.txt", out);
    write_text(path, t.p, t.len);
    t.len = 0;
    int64_t nan_ = 0;
    for (int t1 = 0; t1 < m.topics; t1++)
        for (int t2 = 0; t2 < m.topics; t2++)
            for (int r1 = 0; r1 < m.roles; r1++)
                for (int r2 = 0; r2 < m.roles; r2++) {
                    if (t1 == t2 || r1 == r2) continue;
                    int q[4] = {w2v_grid_word(&m, t1, r1), w2v_grid_word(&m, t1, r2), w2v_grid_word(&m, t2, r1),
                                w2v_grid_word(&m, t2, r2)};
                    for (int k = 0; k < 4; k++) {
                        char nm[16];
                        *w2v_name(&m, q[k], nm) = 0;
                        fl__buf_printf(&t, "%s%s", k ? " " : "", nm);
                    }
                    fl__buf_printf(&t, "\n");
                    nan_++;
                }
    snprintf(path, olen + 16, "%s/analogies.txt", out);
    if (t.failed) cli_die(1, "out of memory");
    write_text(path, t.p, t.len);
    fl__buf_free(&t);
    double c_chance = (double)(m.words - 1) / (double)(m.topics * m.words - 1), a_chance = 1.0 / (double)(nseen - 3);
    char j[1024];
    int jn = snprintf(j, sizeof j,
                      "{\"format\":\"word2vec\",\"sentences\":%lld,\"tokens\":%lld,\"files\":%d,\"seed\":%llu,"
                      "\"dict_size\":%d,\"topics\":%d,\"topic_words\":%d,\"roles\":%d,\"role_words\":%d,"
                      "\"background\":%d,\"analogies\":%lld,\"ceiling_cluster_acc\":1,\"ceiling_analogy_acc\":1,"
                      "\"chance_cluster_acc\":%.6f,\"chance_analogy_acc\":%.6f}\n",
                      (long long)sentences, (long long)tokens, files, (unsigned long long)seed, nseen, m.topics, m.words,
                      m.roles, m.role_words, m.background, (long long)nan_, c_chance, a_chance);
    snprintf(path, olen + 16, "%s/planted.json", out);
    write_text(path, j, (size_t)jn);
    printf("fleet-datagen word2vec: seed %llu, %lld sentences, %lld tokens, %d words in %s/dict.txt\n",
           (unsigned long long)seed, (long long)sentences, (long long)tokens, nseen, out);
    printf("  %d clusters of %d words (chance nearest-neighbour accuracy %.4f), %lld analogies (chance %.4f); "
           "a model of the planted structure reaches 1.0 on both\n",
           m.topics, m.words, c_chance, (long long)nan_, a_chance);
    free(buf), free(w), free(order), free(count), free(m.name), free(m.zipf), free(dir), free(path);
    return 0;
}

#endif
