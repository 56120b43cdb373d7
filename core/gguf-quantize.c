/* gst-dflash — a GGUF file's matrices quantized into a new GGUF file
 * (gguf-quantize.h). */
#include "gguf-quantize.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <glib/gstdio.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "dfl-parallel.h"
#include "gguf-write.h"
#include "gguf.h"

/* llama.cpp's file types (general.file_type) of the schemes */
static const struct {
  const char *name;
  guint32 file_type;
} schemes[] = {
  [DFL_QUANT_Q8_0] = { "q8_0", 7 },
  [DFL_QUANT_Q4_0] = { "q4_0", 2 },
  [DFL_QUANT_Q4_K] = { "q4_k", 14 },     /* MOSTLY_Q4_K_S */
  [DFL_QUANT_Q4_K_M] = { "q4_k_m", 15 },
  [DFL_QUANT_Q6_K] = { "q6_k", 18 },
};

/* Output bytes quantized between two writes: bounds the buffer. */
#define CHUNK_BYTES (16u << 20)
/* Rows a thread claims at a time. */
#define PIECE_ROWS 4

gboolean
dfl_quant_scheme_parse (const char *name, DflQuantScheme *scheme, GError **error)
{
  for (guint i = 0; i < G_N_ELEMENTS (schemes); i++)
    if (g_ascii_strcasecmp (name, schemes[i].name) == 0) {
      *scheme = (DflQuantScheme) i;
      return TRUE;
    }
  g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "type '%s' is not one of %s", name,
               DFL_QUANT_SCHEME_NAMES);
  return FALSE;
}

const char *
dfl_quant_scheme_name (DflQuantScheme scheme)
{
  g_return_val_if_fail ((guint) scheme < G_N_ELEMENTS (schemes), "invalid");
  return schemes[scheme].name;
}

/* Layer of a "blk.N.…" name, or −1. */
static int
layer_of (const char *name)
{
  char *end;
  long n;

  if (strncmp (name, "blk.", 4) != 0)
    return -1;
  n = strtol (name + 4, &end, 10);
  return end != name + 4 && *end == '.' && n >= 0 && n < G_MAXINT ? (int) n : -1;
}

/* llama.cpp's Q4_K_M gives these layers' attn_v and ffn_down more bits:
 * the first and last eighth, and every third layer in between. */
static gboolean
more_bits_layer (int layer, int n_layers)
{
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

static gboolean
is_head (const char *name, gboolean has_output)
{
  return strcmp (name, "output.weight") == 0
      || (!has_output && strcmp (name, "token_embd.weight") == 0);
}

DflDtype
dfl_quant_scheme_type (DflQuantScheme scheme, const char *name, gint64 cols, int n_layers,
                       gboolean has_output, DflDtype fallback)
{
  DflDtype want;
  int layer = layer_of (name);

  switch (scheme) {
    case DFL_QUANT_Q8_0: want = DFL_DTYPE_Q8_0; break;
    case DFL_QUANT_Q4_0: want = DFL_DTYPE_Q4_0; break;
    case DFL_QUANT_Q6_K: want = DFL_DTYPE_Q6_K; break;
    case DFL_QUANT_Q4_K:
      want = is_head (name, has_output) ? DFL_DTYPE_Q6_K : DFL_DTYPE_Q4_K;
      break;
    case DFL_QUANT_Q4_K_M:
    default:
      want = is_head (name, has_output)
          || (layer >= 0 && more_bits_layer (layer, n_layers)
              && (g_str_has_suffix (name, ".attn_v.weight")
                  || g_str_has_suffix (name, ".ffn_down.weight")))
          ? DFL_DTYPE_Q6_K : DFL_DTYPE_Q4_K;
      break;
  }
  if (cols % (gint64) dfl_dtype_block_elems (want) == 0)
    return want;
  want = want == DFL_DTYPE_Q4_K ? DFL_DTYPE_Q4_0 : want == DFL_DTYPE_Q6_K ? DFL_DTYPE_Q8_0 : want;
  return cols % (gint64) dfl_dtype_block_elems (want) == 0 ? want : fallback;
}

/* Rows [row0, row0 + rows) of a matrix quantized into `out`, the rows
 * claimed PIECE_ROWS at a time by the kernels' threads. */
typedef struct {
  const DflStoredTensor *t;
  DflDtype to;
  gint64 cols, row0, rows;
  gsize row_bytes;
  guint8 *out;
  float *scratch;              /* cols floats per slot */
  atomic_long next;
} QuantWork;

static void
quantize_pieces (void *ctx, int slot)
{
  QuantWork *w = ctx;
  float *x = w->scratch + (gsize) slot * (gsize) w->cols;
  long piece;

  while ((piece = atomic_fetch_add (&w->next, 1)) * PIECE_ROWS < w->rows) {
    gint64 r0 = piece * PIECE_ROWS, r1 = MIN (r0 + PIECE_ROWS, w->rows);

    for (gint64 r = r0; r < r1; r++) {
      dfl_tensor_read_f32 (w->t, (w->row0 + r) * w->cols, w->cols, x);
      dfl_quantize_row (w->to, x, w->out + (gsize) r * w->row_bytes, w->cols);
    }
  }
}

static gboolean
write_quantized (DflGgufWriter *wr, const DflStoredTensor *t, DflDtype to, GError **error)
{
  gint64 cols = t->shape[t->n_dims - 1], rows = t->n_elements / cols;
  gsize row_bytes = dfl_dtype_row_bytes (to, cols);
  gint64 chunk = MAX (1, (gint64) (CHUNK_BYTES / row_bytes));
  int threads = MAX (1, dfl_parallel_threads ());
  g_autofree guint8 *out = g_malloc ((gsize) MIN (chunk, rows) * row_bytes);
  g_autofree float *scratch = g_malloc ((gsize) threads * (gsize) cols * sizeof (float));

  for (gint64 r = 0; r < rows; r += chunk) {
    QuantWork w = {
      .t = t, .to = to, .cols = cols, .row0 = r, .rows = MIN (chunk, rows - r),
      .row_bytes = row_bytes, .out = out, .scratch = scratch,
    };

    atomic_init (&w.next, 0);
    dfl_parallel_run (threads, quantize_pieces, &w);
    if (!dfl_gguf_writer_write (wr, out, (gsize) w.rows * row_bytes, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
same_file (const char *a, const char *b)
{
  GStatBuf sa, sb;

  return g_stat (a, &sa) == 0 && g_stat (b, &sb) == 0 && sa.st_dev == sb.st_dev
      && sa.st_ino == sb.st_ino;
}

gboolean
dfl_gguf_quantize (const char *in, const char *out, DflQuantScheme scheme,
                   DflQuantProgress progress, gpointer user_data, GError **error)
{
  g_autoptr (DflGguf) g = NULL;
  g_autoptr (DflGgufWriter) w = NULL;
  g_autofree DflDtype *types = NULL;
  guint n_tensors;
  int n_layers = 0;
  gboolean has_output;

  g_return_val_if_fail ((guint) scheme < G_N_ELEMENTS (schemes), FALSE);
  if (same_file (in, out)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the output is the input file; write the quantized model to another file",
                 out);
    return FALSE;
  }
  if (!(g = dfl_gguf_open (in, error)))
    return FALSE;
  n_tensors = dfl_gguf_n_tensors (g);
  has_output = dfl_gguf_find_tensor (g, "output.weight") != NULL;
  for (guint i = 0; i < n_tensors; i++)
    n_layers = MAX (n_layers, layer_of (dfl_gguf_nth_tensor (g, i)->name) + 1);

  /* every tensor's type first: a refusal comes before anything is written */
  types = g_new (DflDtype, n_tensors);
  w = dfl_gguf_writer_new (dfl_gguf_alignment (g));
  for (guint i = 0; i < n_tensors; i++) {
    const DflStoredTensor *t = dfl_gguf_nth_tensor (g, i);

    types[i] = t->dtype;
    if (t->n_dims == 2 && dfl_dtype_is_quantized (t->dtype)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: tensor '%s' is %s already; quantize from the F32, F16 or BF16 file "
                   "(quantizing quantized weights would round them twice)", in, t->name,
                   dfl_dtype_name (t->dtype));
      return FALSE;
    }
    if (t->n_dims == 2 && dfl_dtype_is_float (t->dtype))
      types[i] = dfl_quant_scheme_type (scheme, t->name, t->shape[1], n_layers, has_output,
                                        t->dtype);
    if (!dfl_gguf_writer_add_tensor (w, t->name, types[i], t->n_dims, t->shape, error)) {
      g_prefix_error (error, "%s: ", in);
      return FALSE;
    }
  }
  for (guint i = 0; i < dfl_gguf_n_values (g); i++)
    dfl_gguf_writer_add_value (w, dfl_gguf_nth_value (g, i));
  dfl_gguf_writer_set_u32 (w, "general.quantization_version", 2);
  dfl_gguf_writer_set_u32 (w, "general.file_type", schemes[scheme].file_type);

  if (!dfl_gguf_writer_begin (w, out, error))
    return FALSE;
  for (guint i = 0; i < n_tensors; i++) {
    const DflStoredTensor *t = dfl_gguf_nth_tensor (g, i);

    if (progress)
      progress (i, n_tensors, t, types[i], user_data);
    if (types[i] == t->dtype ? !dfl_gguf_writer_write (w, t->data, t->n_bytes, error)
                             : !write_quantized (w, t, types[i], error))
      return FALSE;
    /* read once: the process need not hold the whole input */
    dfl_tensor_release_pages (t);
  }
  return dfl_gguf_writer_finish (w, error);
}
