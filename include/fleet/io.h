/*
 * fleet/io.h - saving and loading models.
 *
 * Tensors are written as safetensors (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length, a JSON header, then raw little-endian data.  NumPy and
 * PyTorch read them without this library.  Programs are written in the readable text form
 * of fl_prog_to_text().  Every write goes to a temporary name, is fsynced, renamed into
 * place, and the directory is fsynced: a crash leaves either the old or the new file.
 * A truncated or corrupt file is reported with FL_ECORRUPT and nothing is loaded.
 *
 * Layout of a directory:
 *   save_persistables:    <dir>/persistables.safetensors
 *   save_inference_model: <dir>/__model__ (program text, feed and fetch names inside)
 *                         <dir>/params.safetensors
 */
#ifndef FLEET_IO_H
#define FLEET_IO_H

#include "fleet/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes `n` named tensors to one safetensors file, atomically. */
FL_API int fl_io_write_safetensors(const char *path, const char *const *names, const fl_tensor *const *tensors, int n);
/* Reads every tensor of a safetensors file.  *names and *tensors are malloc'ed arrays of
 * *n entries; free them with fl_io_free_tensors(). All-or-nothing. */
FL_API int fl_io_read_safetensors(const char *path, char ***names, fl_tensor ***tensors, int *n);
FL_API void fl_io_free_tensors(char **names, fl_tensor **tensors, int n);

/* Saves every persistable variable of p (parameters, optimizer state, learning rate,
 * counters) found in the executor's scope. Creates dir if needed. */
FL_API int fl_io_save_persistables(fl_exe *e, const char *dir, const fl_prog *p);
/* Loads them back into the executor's scope; every persistable variable of p must be in
 * the file with the same dtype and shape, else nothing is changed. */
FL_API int fl_io_load_persistables(fl_exe *e, const char *dir, const fl_prog *p);

/* Saves p pruned to feed -> targets, with the parameters it needs. */
FL_API int fl_io_save_inference_model(fl_exe *e, const char *dir, const char *const *feeds, int nfeed,
                                      fl_var *const *targets, int ntarget, const fl_prog *p);
/* Loads a program saved by fl_io_save_inference_model into *prog (caller frees) and its
 * parameters into the executor's scope.  *feeds / *fetches are malloc'ed arrays of
 * malloc'ed names; free with fl_io_free_names(). */
FL_API int fl_io_load_inference_model(fl_exe *e, const char *dir, fl_prog **prog, char ***feeds, int *nfeed,
                                      char ***fetches, int *nfetch);
FL_API void fl_io_free_names(char **names, int n);

#ifdef __cplusplus
}
#endif
#endif
