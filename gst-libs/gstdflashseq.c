/* gst-dflash — one sequence of the loop, a handle shared by reference. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashseq.h"


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
  if (s->stop_ids)
    g_array_unref (s->stop_ids);
  if (s->chain_text)
    g_array_unref (s->chain_text);
  g_clear_pointer (&s->detok, dfl_detokenizer_free);
  g_free (s->taps);
  g_free (s->tip);
  g_clear_pointer (&s->draft, dfl_draft_ctx_free);
  gst_clear_buffer (&s->taps_buf);
  /* the engines the state above was made from go after it */
  gst_clear_object (&s->device);
  gst_object_unref (s->model);
  g_free (s);
}

void
gst_dflash_seq_unref (GstDflashSeq *seq)
{
  if (seq && g_atomic_int_dec_and_test (&seq->refcount))
    seq_free (seq);
}
