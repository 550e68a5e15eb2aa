/*
 * datagen_text.h - the text subcommands of fleet-datagen (included by tools/fleet-datagen.c
 * after its option and file helpers): option parsing and the summary around the library's
 * generators, fl_model_simnet_generate and fl_model_word2vec_generate (fleet/models.h):
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

#include "fleet/models.h"

/* An error of the generator: a bad combination of options is a usage error, the rest I/O. */
static _Noreturn void text_fail(int st) { cli_die(st == FL_EINVAL ? 2 : 1, "%s", fl_last_error()); }

static int datagen_simnet(int argc, char **argv)
{
    fl_model_simnet_datagen g = fl_model_simnet_datagen_default();
    g.rows = -1;
    const char *out = NULL;
    const dg_opt opts[] = {{"rows", 'i', &g.rows, 1, MAX_ROWS},
                           {"files", 'n', &g.files, 1, MAX_FILES},
                           {"out", 's', &out, 0, 0},
                           {"test-rows", 'i', &g.test_rows, 0, MAX_ROWS},
                           {"seed", 'u', &g.seed, 0, 0},
                           {"topics", 'n', &g.topics, 2, 100000},
                           {"topic-words", 'n', &g.topic_words, 1, 100000},
                           {"background", 'n', &g.background, 1, 10000000},
                           {"purity", 'r', &g.purity, 0.01, 1},
                           {"mix", 'r', &g.mix, 0, 0.99}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "simnet options: --rows N --out DIR --test-rows M --files K --seed S --topics T --topic-words W "
             "--background B --purity P --mix X");
    if (g.rows < 0) cli_die(2, "--rows N is required (the number of training triples)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (g.purity + g.mix > 1) cli_die(2, "--purity %g plus --mix %g exceeds 1", g.purity, g.mix);
    fl_model_simnet_datagen_info info;
    int st = fl_model_simnet_generate(&g, out, &info);
    if (st != FL_OK) text_fail(st);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/train", out);
    remove_stale(dir, g.files);
    snprintf(dir, sizeof dir, "%s/test", out);
    remove_stale(dir, 1);
    char a_tr[32], a_te[32];
    fmt_num(a_tr, sizeof a_tr, info.ceiling_train, 4, "n/a");
    fmt_num(a_te, sizeof a_te, info.ceiling_test, 4, "n/a");
    int64_t test_rows = g.test_rows < 0 ? g.rows / 5 : g.test_rows;
    printf("fleet-datagen simnet: seed %llu, dict_dim %lld (%d topics x %d words + %d background)\n",
           (unsigned long long)g.seed, (long long)info.dict_dim, g.topics, g.topic_words, g.background);
    printf("  train %10lld triples %5d file%s  ceiling order rate %s  -> %s/train\n", (long long)g.rows, g.files,
           g.files == 1 ? " " : "s", a_tr, out);
    printf("  test  %10lld triples     1 file   ceiling order rate %s  -> %s/test\n", (long long)test_rows, a_te, out);
    return 0;
}

static int datagen_word2vec(int argc, char **argv)
{
    fl_model_word2vec_datagen g = fl_model_word2vec_datagen_default();
    g.sentences = -1;
    const char *out = NULL;
    const dg_opt opts[] = {{"sentences", 'i', &g.sentences, 1, MAX_ROWS},
                           {"files", 'n', &g.files, 1, MAX_FILES},
                           {"out", 's', &out, 0, 0},
                           {"seed", 'u', &g.seed, 0, 0},
                           {"topics", 'n', &g.topics, 2, 10000},
                           {"topic-words", 'n', &g.topic_words, 2, 10000},
                           {"roles", 'n', &g.roles, 2, 100},
                           {"role-words", 'n', &g.role_words, 1, 10000},
                           {"background", 'n', &g.background, 1, 1000000},
                           {"length", 'n', &g.length, 2, 200}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "word2vec options: --sentences N --out DIR --files K --seed S --topics T --topic-words W --roles R "
             "--role-words Q --background B --length L");
    if (g.sentences < 0) cli_die(2, "--sentences N is required (the corpus size in sentences)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    fl_model_word2vec_datagen_info info;
    int st = fl_model_word2vec_generate(&g, out, &info);
    if (st != FL_OK) text_fail(st);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/train", out);
    remove_stale(dir, g.files);
    printf("fleet-datagen word2vec: seed %llu, %lld sentences, %lld tokens, %lld words in %s/dict.txt\n",
           (unsigned long long)g.seed, (long long)g.sentences, (long long)info.tokens, (long long)info.dict_size, out);
    printf("  %d clusters of %d words (chance nearest-neighbour accuracy %.4f), %lld analogies (chance %.4f); "
           "a model of the planted structure reaches 1.0 on both\n",
           g.topics, g.topic_words, info.chance_cluster_acc, (long long)info.analogies, info.chance_analogy_acc);
    return 0;
}

#endif
