/*
 * datagen_images.h - the images subcommand of fleet-datagen (included by
 * tools/fleet-datagen.c after its option helpers): option parsing and the summary around the
 * library's generator, fl_data_image_generate (fleet/data.h):
 *
 *   fleet-datagen images --out DIR [--train N] [--val M] [--classes C] [--min-size A]
 *                        [--max-size B] [--quality Q] [--noise S] [--label-noise P] [--seed S]
 *
 * A JPEG data set with planted classes (colour, shape, texture), in both layouts that the
 * image reader reads (class folders and Paddle's train.txt / val.txt lists), and the best
 * reachable accuracy of each split: the share of labels that are their image's class.
 */
#ifndef FLEET_DATAGEN_IMAGES_H
#define FLEET_DATAGEN_IMAGES_H

#include "fleet/data.h"

static int datagen_images(int argc, char **argv)
{
    fl_data_image_datagen g = fl_data_image_datagen_default();
    const char *out = NULL;
    const dg_opt opts[] = {{"out", 's', &out, 0, 0},
                           {"train", 'i', &g.train, 1, 100000000},
                           {"val", 'i', &g.val, 0, 100000000},
                           {"classes", 'n', &g.classes, 2, 120},
                           {"min-size", 'n', &g.min_size, 8, 4096},
                           {"max-size", 'n', &g.max_size, 8, 4096},
                           {"quality", 'n', &g.quality, 1, 100},
                           {"noise", 'r', &g.noise, 0, 128},
                           {"label-noise", 'r', &g.label_noise, 0, 0.5},
                           {"seed", 'u', &g.seed, 0, 0}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "images options: --out DIR --train N --val M --classes C --min-size A --max-size B --quality Q "
             "--noise S --label-noise P --seed S");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (g.max_size < g.min_size) cli_die(2, "--max-size %d is smaller than --min-size %d", g.max_size, g.min_size);
    fl_data_image_datagen_info info;
    int st = fl_data_image_generate(&g, out, &info);
    if (st != FL_OK) text_fail(st);
    char a_val[32], c_val[32];
    fmt_num(a_val, sizeof a_val, info.ceiling_val, 4, "n/a");
    fmt_num(c_val, sizeof c_val, info.chance_val, 4, "n/a");
    printf("fleet-datagen images: seed %llu, %d classes, %d-%d pixels a side, quality %d, noise %g, label noise %g\n",
           (unsigned long long)g.seed, g.classes, g.min_size, g.max_size, g.quality, g.noise, g.label_noise);
    printf("  train %9lld images  ceiling accuracy %.4f  -> %s/train.txt, %s/train/<class>/\n", (long long)g.train,
           info.ceiling_train, out, out);
    printf("  val   %9lld images  ceiling accuracy %s (chance %s)  -> %s/val.txt, %s/val/<class>/\n", (long long)g.val,
           a_val, c_val, out, out);
    printf("  %.1f MB of JPEG; %s/planted.json\n", (double)info.bytes / 1e6, out);
    return 0;
}

#endif
