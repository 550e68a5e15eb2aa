/*
 * fleet/data.h - datasets: QueueDataset and InMemoryDataset over MultiSlot, Criteo and
 * libsvm text, with Paddle's names and semantics.
 *
 *   fl_dataset *ds = fl_dataset_create("InMemoryDataset");
 *   fl_var *vars[] = {dense, c1, ..., c26, label};
 *   fl_dataset_set_use_var(ds, vars, 28);
 *   fl_dataset_set_batch_size(ds, 512);
 *   fl_dataset_set_thread(ds, 2);
 *   fl_dataset_set_filelist(ds, files, nfiles);
 *   fl_dataset_load_into_memory(ds);
 *   fl_dataset_local_shuffle(ds, seed);
 *   ... fl_exe_train_from_dataset(exe, prog, ds, ...) ...
 *
 * Slots follow use_var order.  A variable with lod_level 1 is a variable-length slot (fed as a
 * [total, 1] tensor with one level of LoD); lod_level 0 is a dense slot whose width is the
 * product of the variable's dimensions after the batch dimension (dense_input [-1, 13] -> 13
 * values per line; label [-1, 1] -> 1).  int64 variables read unsigned 64-bit ids (stored
 * bit for bit, as Paddle's uint64 slots); float32 variables read floats.
 *
 * Formats (fl_dataset_set_format):
 *   "multislot" (default)  Paddle's grammar: per slot `N v1 ... vN`, N >= 1, tokens separated
 *                          by spaces or tabs (runs allowed, as Paddle's strtol-based reader),
 *                          one instance per line; a trailing CR and trailing blanks are
 *                          ignored; a blank line is an error (slot #1 missing).
 *   "criteo"               label \t I1..I13 \t C1..C26 (40 tab-separated columns, empty fields
 *                          allowed).  use_var must be [dense float32 (13 wide), 26 int64 lod
 *                          slots, int64 label].  Dense: (x - min) / diff with Paddle's
 *                          constants, empty -> 0.  Categorical: fl_data_criteo_id().
 *   "libsvm"               label idx:val idx:val ...; use_var must be [ids int64 lod 1,
 *                          values float32 lod 1, label (int64 or float32, width 1)].
 * pipe_command (default "cat", which spawns nothing): each file is fed to `sh -c cmd` on its
 * standard input and the command's standard output is parsed as MultiSlot.
 *
 * Bad input: every malformed line is reported as "FILE:LINE: slot 'NAME' (#K): what" (FL_ECORRUPT;
 * a Criteo line with the wrong number of columns as "FILE:LINE: expected 40 ...").  The
 * bad-line policy "stop" (default) fails the read with that message; "skip" drops the line,
 * counts it (fl_dataset_bad_lines) and logs the first few messages plus the total at the end
 * of a pass.  A pipe_command that exits non-zero reports its exit status and the tail of its
 * standard error; one silent for pipe_timeout seconds is killed (FL_ETIMEDOUT).  Every message
 * and policy is listed in docs/data.md.
 *
 * Threads: the setters, load, shuffles and begin/end are not thread safe and fail with
 * FL_ESTATE during a pass or a preload.  fl_dataset_next may run concurrently for different
 * thread indexes.
 */
#ifndef FLEET_DATA_H
#define FLEET_DATA_H

#include "fleet/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_dataset fl_dataset;
typedef struct fl_data_batch fl_data_batch;

/* kind: "QueueDataset" (streaming) or "InMemoryDataset".  NULL + error on another name. */
FL_API fl_dataset *fl_dataset_create(const char *kind);
FL_API void fl_dataset_free(fl_dataset *ds);

FL_API int fl_dataset_set_filelist(fl_dataset *ds, const char *const *files, int n);
FL_API int fl_dataset_set_batch_size(fl_dataset *ds, int batch_size);
/* Reader threads; the effective number is clamped to the number of files, as Paddle. */
FL_API int fl_dataset_set_thread(fl_dataset *ds, int thread_num);
FL_API int fl_dataset_set_use_var(fl_dataset *ds, fl_var *const *vars, int n);
FL_API int fl_dataset_set_pipe_command(fl_dataset *ds, const char *cmd);
/* A pipe_command that produces no output for this long is killed and reported (default 300). */
FL_API int fl_dataset_set_pipe_timeout(fl_dataset *ds, double seconds);
FL_API int fl_dataset_set_format(fl_dataset *ds, const char *format);
/* Criteo: categorical ids are hashed into [0, dim) (default 1000001, Paddle's benchmark). */
FL_API int fl_dataset_set_sparse_feature_dim(fl_dataset *ds, uint64_t dim);
/* "stop" (default) or "skip". */
FL_API int fl_dataset_set_bad_line_policy(fl_dataset *ds, const char *policy);

FL_API int fl_dataset_thread_num(const fl_dataset *ds); /* effective (clamped) */
FL_API int fl_dataset_batch_size(const fl_dataset *ds);
FL_API int fl_dataset_num_slots(const fl_dataset *ds);
FL_API const char *fl_dataset_slot_name(const fl_dataset *ds, int i);
FL_API int64_t fl_dataset_bad_lines(const fl_dataset *ds); /* skipped in the last pass / load */

/* InMemoryDataset only (a QueueDataset returns FL_EINVAL naming the call).  A load parses the
 * file list with thread_num threads, keeps the records in file-list order and appends them to
 * what is held; on an error nothing is added. */
FL_API int fl_dataset_load_into_memory(fl_dataset *ds);
FL_API int fl_dataset_preload_into_memory(fl_dataset *ds); /* starts loading in the background */
FL_API int fl_dataset_wait_preload_done(fl_dataset *ds);
FL_API int fl_dataset_local_shuffle(fl_dataset *ds, uint64_t seed);
FL_API void fl_dataset_release_memory(fl_dataset *ds);
FL_API int64_t fl_dataset_get_memory_data_size(const fl_dataset *ds); /* records held here */

/* Global shuffle moves every record to rank (rand % nranks) through an all-to-all that the
 * caller provides (fleet_dataset_global_shuffle wires it to the workers' communicator).
 * alltoallv: send[i] (send_len[i] bytes) goes to rank i; on return recv[i] (malloc'd by the
 * callee, freed by the caller; recv_len[i] bytes) came from rank i. */
typedef struct {
    int rank, nranks;
    void *ctx;
    int (*alltoallv)(void *ctx, const void *const *send, const size_t *send_len, void **recv, size_t *recv_len);
} fl_data_exchange;
FL_API int fl_dataset_global_shuffle(fl_dataset *ds, const fl_data_exchange *ex, uint64_t seed);

/* Reading.  A pass: fl_dataset_begin, then each of thread_num threads calls
 * fl_dataset_next(ds, t, b), which returns 1 with a batch in b, until it returns 0 (end of its
 * share) or < 0 (error, message in fl_last_error of that thread; the other readers then end
 * their shares early), then fl_dataset_end (reports skipped lines; returns the first reader
 * error if any).  Ending a pass early is allowed; it stops any pipe_command child.  A QueueDataset hands files to threads from a shared queue
 * and parses them as they are read; an InMemoryDataset splits its records among threads. */
FL_API int fl_dataset_begin(fl_dataset *ds);
FL_API int fl_dataset_next(fl_dataset *ds, int thread, fl_data_batch *b);
FL_API int fl_dataset_end(fl_dataset *ds);

/* How far the current pass has read (or the last one read, after fl_dataset_end).  A
 * QueueDataset counts the bytes of its files (sizes taken at fl_dataset_begin; a file read
 * through a pipe_command counts when the command's output ends, the others line by line)
 * and the files finished; an InMemoryDataset counts records (files 0).  fraction is
 * done / total in [0, 1].  Safe to call from any thread during a pass; never blocks. */
typedef struct {
    int64_t done, total; /* in `unit` */
    int files_done, files;
    const char *unit; /* "bytes" or "records" (static storage) */
    double fraction;
} fl_data_progress;
FL_API int fl_dataset_progress(const fl_dataset *ds, fl_data_progress *out);

/* A batch: one tensor per slot, reused from call to call.  The last batch of a thread's
 * share may hold fewer instances than batch_size. */
FL_API fl_data_batch *fl_data_batch_create(const fl_dataset *ds);
FL_API void fl_data_batch_free(fl_data_batch *b);
FL_API int fl_data_batch_size(const fl_data_batch *b); /* instances */
FL_API int fl_data_batch_num_slots(const fl_data_batch *b);
FL_API const char *fl_data_batch_name(const fl_data_batch *b, int i);
FL_API fl_tensor *fl_data_batch_tensor(fl_data_batch *b, int i);

/* The Criteo categorical hash: FNV-1a 64 over "C<k>:" (k = 1..26) followed by the raw field
 * bytes, modulo dim.  Empty fields hash too (each column's "missing" id). */
FL_API uint64_t fl_data_criteo_id(int k, const char *field, size_t len, uint64_t dim);


/* ---- Images: an ImageNet-style JPEG reader (src/data/image*.c; docs/data.md "Images") ----
 *
 * Inputs, chosen by what `path` is:
 *   a directory  one sub-directory per class (`root/<class>/NAME.jpg`): classes in byte order of
 *                their names, label = index; the files in each (.jpg, .jpeg, .png, any case)
 *                in byte order.
 *   a file       Paddle's ImageNet list (`train.txt`): `relative/path.jpg label` per line, the
 *                path relative to the list's directory (or absolute), the label the last
 *                token, a non-negative integer; blank lines are skipped.  A bad line fails
 *                with FL_ECORRUPT "LIST:LINE: what".
 * Decoding, the format told by the file's first bytes (not its name): JPEG through libjpeg-turbo
 * (RGB, greyscale and CMYK, converted as Pillow converts them), PNG through libpng (grey,
 * palette, RGB, with or without alpha, 1 to 16 bits: to RGB, alpha dropped, 16-bit samples to
 * their high byte).  An empty, truncated or corrupt file, or one in neither format, fails with
 * FL_ECORRUPT naming the file (a PNG in a build without libpng: FL_EUNSUPPORTED naming it).
 * A JPEG is decoded at 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's DCT scaling) when that
 * still leaves the resize at least the pixels it outputs (dct_scale, see docs/data.md).
 * The bad-image policy is the datasets' bad-line policy: "stop" (skip_bad 0, the default)
 * fails the pass with that message; "skip" (skip_bad 1) leaves such a file out of its batch
 * (which is then smaller; a batch with no good image is left out), counts it
 * (fl_data_image_reader_bad_images) and logs the first few messages plus the total at the end
 * of the pass.  A file that cannot be opened or read (FL_ENOTFOUND, FL_EIO) always stops the
 * pass.  A build without libjpeg-turbo refuses every image call with FL_EUNSUPPORTED.
 * Transforms (torchvision's and Paddle's ImageNet recipes), output CHW float32 normalised
 * ((v / 255 - mean) / std):
 *   eval   resize the shorter side to `resize` (bilinear with Pillow's antialiasing, uint8
 *          rounding after each pass), centre crop crop x crop;
 *   train  random resized crop (area fraction in [scale[0], scale[1]], aspect ratio
 *          log-uniform in [ratio[0], ratio[1]], 10 tries then a centre fallback) resized to
 *          crop x crop, horizontal flip with probability `flip`.
 * The random draws of an image depend only on (seed, epoch, its index in the set), so a pass
 * is reproducible whatever the number of threads. */
typedef struct fl_data_image_reader fl_data_image_reader;

typedef struct {
    int batch_size;        /* images per batch (default 32) */
    int threads;           /* decode threads (default 2) */
    int prefetch;          /* batches decoded ahead of the consumer (default 2 x threads) */
    int train;             /* 1: train transform, 0: eval transform (default 0) */
    int crop;              /* output height and width (default 224) */
    int resize;            /* eval: the shorter side before the centre crop (default 256) */
    float scale[2];        /* train: crop area fraction range (default 0.08, 1) */
    float ratio[2];        /* train: crop aspect ratio range (default 3/4, 4/3) */
    float flip;            /* train: horizontal flip probability (default 0.5) */
    float mean[3], std[3]; /* per channel, on the 0..1 scale (default ImageNet's) */
    int shuffle;           /* 1: a new order each epoch from (seed, epoch) (default 0) */
    int drop_last;         /* 1: leave out a last partial batch (default 0) */
    uint64_t seed;         /* default 0 */
    int rank, nranks;      /* this reader reads the images whose position in the epoch's order
                            * is rank modulo nranks (default 0, 1) */
    int skip_bad;          /* bad-image policy: 0 "stop", 1 "skip" (see above; default 0) */
    int dct_scale;         /* 1: decode a JPEG at 1/2, 1/4 or 1/8 of its size when the crop
                            * (train) or the resized image (eval) is at least that much smaller
                            * (default 1); 0: always at full size, the bytes torchvision's
                            * transforms give */
} fl_data_image_options;

/* Fills o with the defaults above.  NULL is ignored. */
FL_API void fl_data_image_options_init(fl_data_image_options *o);

/* Lists the images under `path` (see above); o NULL: the defaults.  Decodes nothing yet.
 * NULL + error (FL_EINVAL naming the option, FL_ENOTFOUND, FL_ECORRUPT, FL_EUNSUPPORTED). */
FL_API fl_data_image_reader *fl_data_image_reader_create(const char *path, const fl_data_image_options *o);
/* Stops and joins the decode threads (waits for the images being decoded), frees.  NULL ok. */
FL_API void fl_data_image_reader_free(fl_data_image_reader *r);
/* Images in the whole set (all ranks); -1 + error for an invalid handle. */
FL_API int64_t fl_data_image_reader_size(const fl_data_image_reader *r);
/* Classes: the directories of a directory layout, max label + 1 of a list. */
FL_API int fl_data_image_reader_num_classes(const fl_data_image_reader *r);
/* Bad images skipped (policy skip) in the current or last pass; -1 + error for an invalid
 * handle. */
FL_API int64_t fl_data_image_reader_bad_images(const fl_data_image_reader *r);
/* Image i of the set (in listing order): its path (owned by the reader) and label. */
FL_API int fl_data_image_reader_item(const fl_data_image_reader *r, int64_t i, const char **path, int64_t *label);

/* Starts epoch `epoch` (>= 0): stops a pass still running, then starts the decode threads on
 * this rank's share, in listing order or shuffled by (seed, epoch). */
FL_API int fl_data_image_reader_begin(fl_data_image_reader *r, int epoch);
/* The next batch, in order: images [n, 3, crop, crop] float32 into `images` (room for
 * batch_size images) and labels [n] into `labels`.  Returns n > 0, 0 at the end of the epoch,
 * or < 0 on the first decode error of the pass (the error names the file; the pass is then
 * over).  Blocks until the decode threads have filled the batch: they read local files and
 * always finish or fail, so there is no deadline; fl_data_image_reader_free stops them.  One
 * consumer thread at a time. */
FL_API int fl_data_image_reader_next(fl_data_image_reader *r, float *images, int64_t *labels);

/* Decodes one file and applies the transform of o (o NULL: the defaults, eval) into out
 * [3, crop, crop]; the train transform draws from `seed`.  For tests and tools. */
FL_API int fl_data_image_load(const char *file, const fl_data_image_options *o, uint64_t seed, float *out);

/* ---- a JPEG data set with planted classes (`fleet-datagen images`; docs/datagen.md) ----
 *
 * Writes under out (created like mkdir -p): out/train/<class>/NNNNNN.jpg and
 * out/val/<class>/NNNNNN.jpg (the directory layout: class folders named "CCC_colour_shape_
 * texture", so byte order is label order), out/train.txt and out/val.txt (Paddle's list:
 * "train/<class>/NNNNNN.jpg LABEL" per line) and out/planted.json.  Class c is colour c % 8,
 * shape c % 5 and texture c / 40 of fixed tables, drawn at a random place, size, rotation and
 * brightness over a random background with pixel noise; a share label_noise of the images
 * carry another class's label.  The class is visible inside the evaluation transform's centre
 * crop, so the best reachable accuracy is the share of labels equal to their image's class:
 * it is counted on the images written and returned (ceiling_*).  JPEG .jpg files of an
 * earlier run in the class folders are removed first; the lists and planted.json are written
 * to NAME.tmp and renamed.  The same configuration gives the same files.  Errors: FL_EINVAL
 * naming the field, FL_EIO naming the path, FL_EUNSUPPORTED without libjpeg-turbo. */
typedef struct {
    int64_t train, val;     /* images per split (default 1000, 200; val may be 0) */
    int classes;            /* 2 .. 120 (default 10) */
    int min_size, max_size; /* height and width each drawn in [min_size, max_size] (default 48, 64) */
    int quality;            /* JPEG quality 1 .. 100 (default 90; chroma subsampled 4:2:0) */
    double noise;           /* standard deviation of the pixel noise, 0 .. 255 scale (default 8) */
    double label_noise;     /* share of images labelled as another class, 0 .. 0.5 (default 0.1) */
    uint64_t seed;          /* default 1 */
} fl_data_image_datagen;
typedef struct {
    double ceiling_train, ceiling_val; /* best reachable accuracy of each split (val: NAN if empty) */
    double chance_val;                 /* the most frequent label's share of val (NAN if empty) */
    int64_t bytes;                     /* JPEG bytes written */
} fl_data_image_datagen_info;
FL_API fl_data_image_datagen fl_data_image_datagen_default(void);
/* info may be NULL. */
FL_API int fl_data_image_generate(const fl_data_image_datagen *g, const char *out, fl_data_image_datagen_info *info);

#ifdef __cplusplus
}
#endif
#endif
