/* gst-dflash — one sequence of the loop, a handle shared by reference. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashseq.h"

#ifdef HAVE_CUDA
#include "cuda-drafter.h"
#endif
#ifdef HAVE_VULKAN
#include "dfl-vk-drafter.h"
#endif

G_DEFINE_BOXED_TYPE (GstDflashSeq, gst_dflash_seq, gst_dflash_seq_ref, gst_dflash_seq_unref);

GstDflashSeq *
gst_dflash_seq_new (GstDflashModel *m, guint id)
{
  GstDflashSeq *s = g_new0 (GstDflashSeq, 1);

  s->refcount = 1;
  s->model = gst_object_ref (m);
  s->id = id;
  s->tokens = g_array_new (FALSE, FALSE, sizeof (int));
  s->tip = g_new0 (float, dfl_target_config (gst_dflash_model_target (m))->hidden);
  return s;
}

GstDflashSeq *
gst_dflash_seq_ref (GstDflashSeq *seq)
{
  g_return_val_if_fail (seq != NULL, NULL);
  g_atomic_int_inc (&seq->refcount);
  return seq;
}

static void
seq_free (GstDflashSeq *s)
{
  g_clear_pointer (&s->kv, dfl_target_seq_free);
  if (s->tokens)
    g_array_unref (s->tokens);
  g_free (s->taps);
  g_free (s->tip);
  dfl_drafter_free (s->drafter);
  gst_clear_buffer (&s->taps_buf);
#ifdef HAVE_CUDA
  g_clear_pointer (&s->cuda_draft, dfl_cuda_draft_ctx_free);
#endif
#ifdef HAVE_VULKAN
  g_clear_pointer (&s->vk_draft, dfl_vk_draft_ctx_free);
#endif
  /* the engines the state above was made from go after it */
  gst_object_unref (s->model);
  g_free (s);
}

void
gst_dflash_seq_unref (GstDflashSeq *seq)
{
  if (seq && g_atomic_int_dec_and_test (&seq->refcount))
    seq_free (seq);
}
