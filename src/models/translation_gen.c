/*
 * translation_gen.c - the planted translation task of `fleet-datagen translation`
 * (fleet/transformer.h, docs/datagen.md): a random source grammar and its deterministic
 * transduction into a target language, written in the Transformer benchmark's format.
 * Every sentence draws from its own stream, hash(seed, split, row), so the same options
 * give the same bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/transformer.h"
#include "../base/base_internal.h"
#include "../io/io_internal.h"

#define NDET 4
#define NPREP 6
#define NCONJ 2
#define CLAUSE_MAX 15 /* NP(4) verb adverb NP(4) preposition NP(4) */
#define MAX_LEN 1000

/* Word categories; the target inflects D, J and V by gender (forms a / b). */
enum { C_DET, C_ADJ, C_NOUN, C_VERB, C_ADV, C_PREP, C_CONJ, C_N };
static const char cat_letter[C_N] = {'d', 'j', 'n', 'v', 'r', 'p', 'c'};
static const int cat_inflects[C_N] = {1, 1, 0, 1, 0, 0, 0};

typedef struct {
    int cat, idx, form; /* form: the gender a target word agrees with (0 / 1) */
} word;

typedef struct {
    const fl_translation_datagen *g;
    int count[C_N];
    int src_base[C_N], trg_base[C_N]; /* first id of each category (after the 3 marks) */
    int64_t src_vocab, trg_vocab;
    unsigned char *gender; /* per noun */
} grammar;

fl_translation_datagen fl_translation_datagen_default(void)
{
    fl_translation_datagen g = {0, -1, 1, 5, 50, 40, 20, 20, 10};
    return g;
}

static void grammar_init(grammar *m, const fl_translation_datagen *g)
{
    m->g = g;
    const int counts[C_N] = {NDET, g->adjectives, g->nouns, g->verbs, g->adverbs, NPREP, NCONJ};
    int s = 3, t = 3;
    for (int c = 0; c < C_N; c++) {
        m->count[c] = counts[c];
        m->src_base[c] = s, m->trg_base[c] = t;
        s += counts[c];
        t += counts[c] * (cat_inflects[c] ? 2 : 1);
    }
    m->src_vocab = s, m->trg_vocab = t;
}

static int64_t trg_id(const grammar *m, word w)
{
    return m->trg_base[w.cat] + (cat_inflects[w.cat] ? 2 * w.idx + w.form : w.idx);
}

static int src_name(char *b, size_t cap, word w) { return snprintf(b, cap, "S%c%d", cat_letter[w.cat], w.idx); }
static int trg_name(char *b, size_t cap, word w)
{
    return cat_inflects[w.cat] ? snprintf(b, cap, "T%c%d%c", cat_letter[w.cat], w.idx, "ab"[w.form])
                               : snprintf(b, cap, "T%c%d", cat_letter[w.cat], w.idx);
}

static int pick(fl_rng *r, int n) { return (int)(fl__rng_next(r) % (uint64_t)n); }

typedef struct {
    word src[MAX_LEN], trg[MAX_LEN], base[MAX_LEN]; /* base: the word-by-word baseline */
    int n, nt;
} sentence;

static void put_src(sentence *s, word w)
{
    s->src[s->n] = w;
    s->base[s->n] = (word){w.cat, w.idx, 0};
    s->n++;
}

/* A noun phrase: source D J* N, target D N J* (reversed), D and J agreeing with N. */
static int noun_phrase(const grammar *m, fl_rng *r, sentence *s)
{
    int d = pick(r, NDET), nadj = pick(r, 3), n = pick(r, m->count[C_NOUN]), adj[2];
    int gnd = m->gender[n];
    for (int k = 0; k < nadj; k++) adj[k] = pick(r, m->count[C_ADJ]);
    put_src(s, (word){C_DET, d, 0});
    for (int k = 0; k < nadj; k++) put_src(s, (word){C_ADJ, adj[k], 0});
    put_src(s, (word){C_NOUN, n, 0});
    s->trg[s->nt++] = (word){C_DET, d, gnd};
    s->trg[s->nt++] = (word){C_NOUN, n, 0};
    for (int k = nadj - 1; k >= 0; k--) s->trg[s->nt++] = (word){C_ADJ, adj[k], gnd};
    return gnd;
}

/* NP verb [adverb] NP [preposition NP] -> NP' [adverb] verb(subject's gender) NP' [NP' postposition]. */
static void clause(const grammar *m, fl_rng *r, sentence *s)
{
    int gs = noun_phrase(m, r, s);
    int v = pick(r, m->count[C_VERB]), adv = pick(r, 2) ? pick(r, m->count[C_ADV]) : -1;
    put_src(s, (word){C_VERB, v, 0});
    if (adv >= 0) {
        put_src(s, (word){C_ADV, adv, 0});
        s->trg[s->nt++] = (word){C_ADV, adv, 0};
    }
    s->trg[s->nt++] = (word){C_VERB, v, gs};
    noun_phrase(m, r, s);
    if (pick(r, 2)) {
        int p = pick(r, NPREP);
        put_src(s, (word){C_PREP, p, 0});
        noun_phrase(m, r, s);
        s->trg[s->nt++] = (word){C_PREP, p, 0};
    }
}

static void make_sentence(const grammar *m, uint64_t split, int64_t row, sentence *s)
{
    const fl_translation_datagen *g = m->g;
    fl_rng r = {fl__hash_u64(fl__hash_u64(g->seed ^ 0x7472616e736cULL) + split * 0x9e3779b97f4a7c15ULL + (uint64_t)row)};
    for (int attempt = 0;; attempt++) {
        s->n = s->nt = 0;
        int want = g->min_len + pick(&r, g->max_len - g->min_len + 1);
        for (;;) {
            clause(m, &r, s);
            if (s->n >= want || s->n + 1 + CLAUSE_MAX > g->max_len) break;
            int c = pick(&r, NCONJ);
            put_src(s, (word){C_CONJ, c, 0});
            s->trg[s->nt++] = (word){C_CONJ, c, 0};
        }
        if ((s->n >= g->min_len && s->n <= g->max_len) || attempt == 1000) return;
    }
}

static void buf_words(fl_buf *b, const word *w, int n, int trg)
{
    char nm[32];
    for (int i = 0; i < n; i++) {
        if (trg) trg_name(nm, sizeof nm, w[i]);
        else src_name(nm, sizeof nm, w[i]);
        fl__buf_printf(b, "%s%s", i ? " " : "", nm);
    }
}

static int write_buf(const char *dir, const char *name, fl_buf *b)
{
    if (b->failed) return fl__err(FL_ENOMEM, "translation datagen: out of memory");
    char *path = fl__path_join(dir, name);
    if (!path) return fl__err(FL_ENOMEM, "translation datagen: out of memory");
    int st = fl__write_file_atomic(path, b->p ? b->p : "", b->len);
    free(path);
    return st;
}

/* One split: DIR/<split>/part-00000; *tokens gets the source tokens; the BLEU statistics of
 * the reference and of the baseline against it go to ref / base. */
static int write_split(const grammar *m, const char *out, const char *split, uint64_t sid, int64_t rows, int64_t *tokens,
                       fl_bleu_stats *ref, fl_bleu_stats *base)
{
    char *dir = fl__path_join(out, split);
    if (!dir) return fl__err(FL_ENOMEM, "translation datagen: out of memory");
    int st = fl__mkdir_p(dir);
    sentence *s = malloc(sizeof *s);
    if (st == FL_OK && !s) st = fl__err(FL_ENOMEM, "translation datagen: out of memory");
    fl_buf b = {0};
    int64_t ids[MAX_LEN], bids[MAX_LEN];
    *tokens = 0;
    for (int64_t i = 0; st == FL_OK && i < rows; i++) {
        make_sentence(m, sid, i, s);
        buf_words(&b, s->src, s->n, 0);
        fl__buf_put(&b, "\t", 1);
        buf_words(&b, s->trg, s->nt, 1);
        fl__buf_put(&b, "\n", 1);
        *tokens += s->n;
        for (int k = 0; k < s->nt; k++) ids[k] = trg_id(m, s->trg[k]);
        for (int k = 0; k < s->n; k++) bids[k] = trg_id(m, s->base[k]);
        if (ref) st = fl_bleu_add(ref, ids, s->nt, ids, s->nt);
        if (st == FL_OK && base) st = fl_bleu_add(base, bids, s->n, ids, s->nt);
    }
    if (st == FL_OK) st = write_buf(dir, "part-00000", &b);
    fl__buf_free(&b);
    free(s);
    free(dir);
    return st;
}

static int write_vocabs(const grammar *m, const char *out)
{
    fl_buf sv = {0}, tv = {0}, all = {0};
    static const char *const marks = "<s>\n<e>\n<unk>\n";
    fl__buf_printf(&sv, "%s", marks);
    fl__buf_printf(&tv, "%s", marks);
    fl__buf_printf(&all, "%s", marks);
    char nm[32];
    for (int c = 0; c < C_N; c++)
        for (int i = 0; i < m->count[c]; i++) {
            src_name(nm, sizeof nm, (word){c, i, 0});
            fl__buf_printf(&sv, "%s\n", nm);
            for (int f = 0; f < (cat_inflects[c] ? 2 : 1); f++) {
                trg_name(nm, sizeof nm, (word){c, i, f});
                fl__buf_printf(&tv, "%s\n", nm);
            }
        }
    fl__buf_put(&all, sv.p + strlen(marks), sv.len - strlen(marks));
    fl__buf_put(&all, tv.p + strlen(marks), tv.len - strlen(marks));
    int st = write_buf(out, "src_vocab.txt", &sv);
    if (st == FL_OK) st = write_buf(out, "trg_vocab.txt", &tv);
    if (st == FL_OK) st = write_buf(out, "vocab_all.txt", &all);
    fl__buf_free(&sv);
    fl__buf_free(&tv);
    fl__buf_free(&all);
    return st;
}

int fl_translation_generate(const fl_translation_datagen *g, const char *out, fl_translation_datagen_info *info)
{
    if (!g || !out || !info) return fl__err(FL_EINVAL, "fl_translation_generate: config, out or info is NULL");
    memset(info, 0, sizeof *info);
    if (g->sentences < 1)
        return fl__err(FL_EINVAL, "translation datagen: sentences must be >= 1, got %lld", (long long)g->sentences);
    if (g->min_len < 5 || g->max_len < CLAUSE_MAX || g->max_len > MAX_LEN || g->min_len > g->max_len)
        return fl__err(FL_EINVAL, "translation datagen: need 5 <= min_len <= max_len, %d <= max_len <= %d (got %d, %d)",
                       CLAUSE_MAX, MAX_LEN, g->min_len, g->max_len);
    if (g->nouns < 1 || g->adjectives < 1 || g->verbs < 1 || g->adverbs < 1 || g->nouns > 100000 ||
        g->adjectives > 100000 || g->verbs > 100000 || g->adverbs > 100000)
        return fl__err(FL_EINVAL,
                       "translation datagen: nouns, adjectives, verbs and adverbs must be in [1, 100000] "
                       "(got %d, %d, %d, %d)",
                       g->nouns, g->adjectives, g->verbs, g->adverbs);
    int64_t test = g->test_sentences < 0 ? (g->sentences / 10 > 0 ? g->sentences / 10 : 1) : g->test_sentences;
    grammar m;
    grammar_init(&m, g);
    m.gender = malloc((size_t)g->nouns);
    if (!m.gender) return fl__err(FL_ENOMEM, "translation datagen: out of memory");
    for (int n = 0; n < g->nouns; n++)
        m.gender[n] = (unsigned char)(fl__hash_u64(g->seed * 1000003ULL + (uint64_t)n) >> 63);
    int st = fl__mkdir_p(out);
    fl_bleu_stats ref = {{0}}, base = {{0}};
    if (st == FL_OK) st = write_vocabs(&m, out);
    if (st == FL_OK) st = write_split(&m, out, "train", 0, g->sentences, &info->train_tokens, NULL, NULL);
    if (st == FL_OK) st = write_split(&m, out, "test", 1, test, &info->test_tokens, &ref, &base);
    fl_bleu_score sr = {0}, sb = {0};
    if (st == FL_OK && test > 0) st = fl_bleu_compute(&ref, &sr);
    if (st == FL_OK && test > 0) st = fl_bleu_compute(&base, &sb);
    info->src_vocab = m.src_vocab;
    info->trg_vocab = m.trg_vocab;
    info->ceiling_bleu = sr.bleu;
    info->baseline_bleu = sb.bleu;
    if (st == FL_OK) {
        fl_buf j = {0};
        fl__buf_printf(&j,
                       "{\n  \"task\": \"translation\",\n  \"seed\": %llu,\n  \"sentences\": %lld,\n  \"test_sentences\": "
                       "%lld,\n  \"min_len\": %d,\n  \"max_len\": %d,\n  \"nouns\": %d,\n  \"adjectives\": %d,\n  "
                       "\"verbs\": %d,\n  \"adverbs\": %d,\n  \"src_vocab\": %lld,\n  \"trg_vocab\": %lld,\n  "
                       "\"rules\": \"NP = det adj* noun -> det(g) noun adj(g)* reversed; clause = NP verb [adv] NP [prep "
                       "NP] -> NP [adv] verb(g of subject) NP [NP postposition]; conjunctions join clauses\",\n  "
                       "\"noun_gender\": \"",
                       (unsigned long long)g->seed, (long long)g->sentences, (long long)test, g->min_len, g->max_len,
                       g->nouns, g->adjectives, g->verbs, g->adverbs, (long long)m.src_vocab, (long long)m.trg_vocab);
        for (int n = 0; n < g->nouns; n++) fl__buf_put(&j, m.gender[n] ? "b" : "a", 1);
        fl__buf_printf(&j, "\",\n  \"ceiling_bleu\": %.4f,\n  \"baseline_bleu\": %.4f\n}\n", sr.bleu, sb.bleu);
        st = write_buf(out, "planted.json", &j);
        fl__buf_free(&j);
    }
    free(m.gender);
    return st;
}
