/*
 * datagen_translation.h - `fleet-datagen translation` (included by tools/fleet-datagen.c
 * after datagen_text.h): option parsing and the summary around fl_translation_generate
 * (fleet/transformer.h):
 *
 *   fleet-datagen translation --sentences N --out DIR [--test-sentences M] [--seed S]
 *                             [--min-len A] [--max-len B] [--nouns K] [--adjectives K]
 *                             [--verbs K] [--adverbs K]
 *
 * A parallel corpus in the Transformer benchmark's format (`source \t target` lines, token
 * vocabularies starting with <s>, <e>, <unk>) whose target is a deterministic transduction
 * of the source: the planted translation scores BLEU 100 on the test split; the printed
 * baseline is the word-by-word translation without reordering or agreement.
 */
#ifndef FLEET_DATAGEN_TRANSLATION_H
#define FLEET_DATAGEN_TRANSLATION_H

#include "fleet/transformer.h"

static int datagen_translation(int argc, char **argv)
{
    fl_translation_datagen g = fl_translation_datagen_default();
    g.sentences = -1;
    const char *out = NULL;
    const dg_opt opts[] = {{"sentences", 'i', &g.sentences, 1, MAX_ROWS},
                           {"test-sentences", 'i', &g.test_sentences, 1, MAX_ROWS},
                           {"out", 's', &out, 0, 0},
                           {"seed", 'u', &g.seed, 0, 0},
                           {"min-len", 'n', &g.min_len, 5, 1000},
                           {"max-len", 'n', &g.max_len, 15, 1000},
                           {"nouns", 'n', &g.nouns, 1, 100000},
                           {"adjectives", 'n', &g.adjectives, 1, 100000},
                           {"verbs", 'n', &g.verbs, 1, 100000},
                           {"adverbs", 'n', &g.adverbs, 1, 100000}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "translation options: --sentences N --out DIR --test-sentences M --seed S --min-len A --max-len B "
             "--nouns K --adjectives K --verbs K --adverbs K");
    if (g.sentences < 0) cli_die(2, "--sentences N is required (the training pairs)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (g.min_len > g.max_len) cli_die(2, "--min-len %d exceeds --max-len %d", g.min_len, g.max_len);
    fl_translation_datagen_info info;
    int st = fl_translation_generate(&g, out, &info);
    if (st != FL_OK) text_fail(st);
    int64_t test = g.test_sentences < 0 ? (g.sentences / 10 > 0 ? g.sentences / 10 : 1) : g.test_sentences;
    printf("fleet-datagen translation: seed %llu, source vocabulary %lld, target vocabulary %lld, sentences of %d..%d "
           "tokens\n",
           (unsigned long long)g.seed, (long long)info.src_vocab, (long long)info.trg_vocab, g.min_len, g.max_len);
    printf("  train %10lld pairs %10lld source tokens  -> %s/train\n", (long long)g.sentences, (long long)info.train_tokens,
           out);
    printf("  test  %10lld pairs %10lld source tokens  -> %s/test\n", (long long)test, (long long)info.test_tokens, out);
    printf("  test BLEU: ceiling %.2f (the planted translation), baseline %.2f (word by word, no reordering or "
           "agreement)\n",
           info.ceiling_bleu, info.baseline_bleu);
    return 0;
}

#endif
