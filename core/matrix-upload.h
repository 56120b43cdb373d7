/* gst-dflash — a host weight matrix put into a device's memory in the
 * float type that device multiplies: as stored, converted between F32,
 * F16 and BF16, or a block-quantized one dequantized on the host.
 *
 * The target's upload (target-device.c) and the drafter's (its own
 * matrices and the target's embedding and head, draft-device.c) both go
 * through here, so a matrix reaches every back end by the same steps.
 */
#pragma once

#include <glib.h>

#include "dfl-backend.h"

G_BEGIN_DECLS

/* The type a matrix stored as `stored` goes onto `device` as when it is to
 * keep the stored values: a float type as it is; a block-quantized one as
 * it is where the device multiplies and gathers that type, else F32, which
 * holds every value of the blocks exactly (matrix-upload.c says why). */
DflDtype dfl_matrix_device_type (DflDevice *device, DflDtype stored);

/* The [rows][cols] host matrix `data`, stored as `stored` (F32, F16, BF16
 * or a block-quantized type, rows packed), written at `offset` of device
 * memory `handle` as `as`: copied where the types agree, else converted on
 * the host a few rows at a time — quantized rows dequantized
 * (dfl_dequantize_row), 16-bit values widened exactly, narrowed to F16 or
 * BF16 by round to nearest even as the CPU converts. `as` is the stored
 * type or F32, F16 or BF16. `name` says which matrix in messages (a type
 * with no dequantizer, or rows that are not whole blocks, are refused
 * naming it). */
gboolean dfl_matrix_upload (DflDevice *device, gpointer handle, gsize offset, DflDtype stored,
                            const void *data, gint64 rows, gint64 cols, DflDtype as,
                            const char *name, GError **error);

G_END_DECLS
