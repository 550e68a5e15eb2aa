/*
 * datagen_bert.h - `fleet-datagen bert` (included by tools/fleet-datagen.c after
 * datagen_text.h): option parsing and the summary around fl_model_bert_generate
 * (fleet/models.h):
 *
 *   fleet-datagen bert --lines N --out DIR [--test-lines M] [--files K] [--seed S]
 *                      [--topics T] [--topic-words W] [--function-words F] [--successors K]
 *                      [--noise X] [--shared-grammar 0|1] [--min-len A] [--max-len B] [--ceiling-lines C]
 *
 * BERT pre-training data in the demo's format (gzip'ed `token_ids;sent_ids;pos_ids;label`
 * lines, vocab.txt, bert_config.json) from planted topics and word chains, with the
 * Bayes-optimal masked-LM and next-sentence accuracies (the ceilings) and the unigram
 * baseline of the masked-LM task.
 */
#ifndef FLEET_DATAGEN_BERT_H
#define FLEET_DATAGEN_BERT_H

#include "fleet/models.h"

static int datagen_bert(int argc, char **argv)
{
    fl_model_bert_datagen g = fl_model_bert_datagen_default();
    g.lines = -1;
    const char *out = NULL;
    const dg_opt opts[] = {{"lines", 'i', &g.lines, 1, MAX_ROWS},
                           {"test-lines", 'i', &g.test_lines, 1, MAX_ROWS},
                           {"files", 'n', &g.files, 1, MAX_FILES},
                           {"out", 's', &out, 0, 0},
                           {"seed", 'u', &g.seed, 0, 0},
                           {"topics", 'n', &g.topics, 1, 10000},
                           {"topic-words", 'n', &g.topic_words, 1, 100000},
                           {"function-words", 'n', &g.function_words, 0, 100000},
                           {"successors", 'n', &g.successors, 1, 64},
                           {"noise", 'r', &g.noise, 0, 1},
                           {"shared-grammar", 'n', &g.shared_grammar, 0, 1},
                           {"min-len", 'n', &g.min_len, 1, 2000},
                           {"max-len", 'n', &g.max_len, 1, 2000},
                           {"ceiling-lines", 'i', &g.ceiling_lines, 0, MAX_ROWS}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "bert options: --lines N --out DIR --test-lines M --files K --seed S --topics T --topic-words W "
             "--function-words F --successors K --noise X --shared-grammar 0|1 --min-len A --max-len B --ceiling-lines C");
    if (g.lines < 0) cli_die(2, "--lines N is required (the training lines)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (g.min_len > g.max_len) cli_die(2, "--min-len %d exceeds --max-len %d", g.min_len, g.max_len);
    if (g.files > g.lines) cli_die(2, "--files %d exceeds --lines %lld", g.files, (long long)g.lines);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fl_model_bert_datagen_info info;
    int st = fl_model_bert_generate(&g, out, &info);
    if (st != FL_OK) text_fail(st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t test = g.test_lines < 0 ? (g.lines / 10 > 0 ? g.lines / 10 : 1) : g.test_lines;
    printf("fleet-datagen bert: seed %llu, vocabulary %lld (%d topics of %d words, %d function words), sentences of "
           "%d..%d words\n",
           (unsigned long long)g.seed, (long long)info.vocab_size, g.topics, g.topic_words, g.function_words, g.min_len,
           g.max_len);
    printf("  train %10lld lines %11lld tokens %5d file%s -> %s/train\n", (long long)g.lines, (long long)info.train_tokens,
           g.files, g.files == 1 ? " " : "s", out);
    printf("  test  %10lld lines %11lld tokens     1 file  -> %s/test\n", (long long)test, (long long)info.test_tokens,
           out);
    printf("  masked-LM accuracy: ceiling %.4f +- %.4f (Bayes-optimal), unigram baseline %.4f\n", info.mlm_ceiling,
           info.mlm_ceiling_se, info.mlm_unigram);
    printf("  next-sentence accuracy: ceiling %.4f +- %.4f (Bayes-optimal), chance 0.5\n", info.nsp_ceiling,
           info.nsp_ceiling_se);
    printf("  (over %lld examples, %lld predicted tokens of the test split, masked as the reader masks; %.2f s)\n",
           (long long)info.ceiling_examples, (long long)info.ceiling_masked,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}

#endif
