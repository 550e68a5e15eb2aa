/*
 * bleu.c - corpus BLEU-4 as multi-bleu.perl computes it (fleet/transformer.h).
 */
#include <math.h>
#include <string.h>

#include "fleet/transformer.h"
#include "../base/base_internal.h"

/* Occurrences of the n-gram at a[0..n) in s[0..len). */
static int64_t count_ngram(const int64_t *s, int64_t len, const int64_t *a, int n)
{
    int64_t c = 0;
    for (int64_t i = 0; i + n <= len; i++)
        if (!memcmp(s + i, a, (size_t)n * sizeof *a)) c++;
    return c;
}

int fl_bleu_add(fl_bleu_stats *s, const int64_t *hyp, int64_t nhyp, const int64_t *ref, int64_t nref)
{
    if (!s) return fl__err(FL_EINVAL, "fl_bleu_add: stats is NULL");
    if (nhyp < 0 || nref < 0 || (nhyp && !hyp) || (nref && !ref))
        return fl__err(FL_EINVAL, "fl_bleu_add: hyp (%lld ids) or ref (%lld ids) is NULL or negative", (long long)nhyp,
                       (long long)nref);
    s->hyp_len += nhyp;
    s->ref_len += nref;
    for (int n = 1; n <= 4; n++) {
        for (int64_t i = 0; i + n <= nhyp; i++) {
            /* each distinct n-gram once, at its first occurrence: min(count in hyp, in ref) */
            if (count_ngram(hyp, i + n - 1, hyp + i, n)) continue;
            int64_t h = count_ngram(hyp + i, nhyp - i, hyp + i, n), r = count_ngram(ref, nref, hyp + i, n);
            s->total[n - 1] += h;
            s->correct[n - 1] += h < r ? h : r;
        }
    }
    return FL_OK;
}

int fl_bleu_compute(const fl_bleu_stats *s, fl_bleu_score *out)
{
    if (!s || !out) return fl__err(FL_EINVAL, "fl_bleu_compute: %s is NULL", s ? "out" : "stats");
    memset(out, 0, sizeof *out);
    if (s->ref_len <= 0) return fl__err(FL_EINVAL, "fl_bleu_compute: the references hold no token");
    out->hyp_len = s->hyp_len;
    out->ref_len = s->ref_len;
    out->ratio = (double)s->hyp_len / (double)s->ref_len;
    if (s->hyp_len <= 0) return FL_OK;
    double logsum = 0;
    int zero = 0;
    for (int n = 0; n < 4; n++) {
        out->precision[n] = s->total[n] ? (double)s->correct[n] / (double)s->total[n] : 0;
        if (out->precision[n] > 0) logsum += log(out->precision[n]);
        else zero = 1; /* multi-bleu.perl's my_log(0) = -9999999999: exp gives 0 */
    }
    out->bp = s->hyp_len < s->ref_len ? exp(1.0 - (double)s->ref_len / (double)s->hyp_len) : 1.0;
    out->bleu = zero ? 0 : 100.0 * out->bp * exp(logsum / 4);
    return FL_OK;
}
