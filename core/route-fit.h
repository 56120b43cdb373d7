/* gst-dflash — fitting the router: a subspace (mean and orthonormal basis)
 * of the target's tip rows for the rounds the block won and one for the
 * rounds the chain won (DESIGN.md, "Router"), and the sidecar record that
 * holds them.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The mean of `n` rows of `dim` (each first scaled to unit length, as the
 * router reads rows) and the top `rank` principal directions of the rows
 * about it (orthonormal, largest variance first), by subspace iteration.
 * `basis` gets rank rows of dim. FALSE with an error where n < 2 or
 * rank ≥ n. */
gboolean dfl_route_fit_subspace (const float *rows, int n, int dim, int rank,
                                 float *mean, float *basis, GError **error);

/* The sidecar's `dflash_route` record (drafter.h's format) as JSON text. */
char *dfl_route_record (const float *block_mean, const float *block_basis,
                        const float *chain_mean, const float *chain_basis,
                        int dim, int rank, int block_rows, int chain_rows);

/* Copy the safetensors file `src` to `dst` (which may be `src`: written
 * atomically) with its metadata key `key` set to `value`. */
gboolean dfl_safetensors_rewrite_metadata (const char *src, const char *dst, const char *key,
                                           const char *value, GError **error);

G_END_DECLS
