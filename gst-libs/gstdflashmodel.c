/* gst-dflash — the model the elements of one loop share. */
#include "gstdflashmodel.h"

#include "dfl-error.h"

struct _GstDflashModel {
  GstObject parent;
  DflTarget *target;
  DflTokenizer *tokenizer;
  char *drafter_path;
  DflDrafter *drafter;       /* for its geometry, router and selector */
  GHashTable *seqs;          /* id → GstDflashSeq */
};

G_DEFINE_TYPE (GstDflashModel, gst_dflash_model, GST_TYPE_OBJECT);

static void
seq_free (GstDflashSeq *s)
{
  dfl_target_seq_free (s->kv);
  if (s->tokens)
    g_array_unref (s->tokens);
  g_free (s->taps);
  g_free (s->tip);
  dfl_drafter_free (s->drafter);
  g_free (s);
}

static void
gst_dflash_model_finalize (GObject *object)
{
  GstDflashModel *m = GST_DFLASH_MODEL (object);

  g_hash_table_unref (m->seqs);
  dfl_drafter_free (m->drafter);
  dfl_tokenizer_free (m->tokenizer);
  dfl_target_free (m->target);
  g_free (m->drafter_path);
  G_OBJECT_CLASS (gst_dflash_model_parent_class)->finalize (object);
}

static void
gst_dflash_model_class_init (GstDflashModelClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = gst_dflash_model_finalize;
}

static void
gst_dflash_model_init (GstDflashModel *m)
{
  m->seqs = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) seq_free);
}

GstDflashModel *
gst_dflash_model_new (const char *target_dir, const char *drafter, gboolean no_drafter,
                      GError **error)
{
  g_autoptr (GstDflashModel) m = g_object_ref_sink (g_object_new (GST_TYPE_DFLASH_MODEL, NULL));
  g_autofree char *tok_path = g_build_filename (target_dir, "tokenizer.json", NULL);
  g_autofree char *beside = g_build_filename (target_dir, "dflash.safetensors", NULL);
  const DflQwen3Config *c;

  if (!(m->target = dfl_target_load (target_dir, error)))
    return NULL;
  c = dfl_target_config (m->target);
  if (g_file_test (tok_path, G_FILE_TEST_EXISTS) && !(m->tokenizer = dfl_tokenizer_load (tok_path, error)))
    return NULL;
  if (!no_drafter) {
    if (drafter && *drafter)
      m->drafter_path = g_strdup (drafter);
    else if (g_file_test (beside, G_FILE_TEST_EXISTS))
      m->drafter_path = g_strdup (beside);
  }
  if (m->drafter_path) {
    if (!(m->drafter = dfl_drafter_open (m->drafter_path, error))
        || !dfl_drafter_check_target (m->drafter, dfl_target_tensors (m->target),
                                      c->tie_word_embeddings, c->layers, c->hidden, c->vocab, error))
      return NULL;
  }
  return g_steal_pointer (&m);
}

const DflTarget *
gst_dflash_model_target (GstDflashModel *m)
{
  return m->target;
}

const DflTokenizer *
gst_dflash_model_tokenizer (GstDflashModel *m)
{
  return m->tokenizer;
}

const DflDrafterGeometry *
gst_dflash_model_geometry (GstDflashModel *m)
{
  return m->drafter ? dfl_drafter_geometry (m->drafter) : NULL;
}

const char *
gst_dflash_model_drafter_path (GstDflashModel *m)
{
  return m->drafter_path;
}

DflDrafter *
gst_dflash_model_drafter (GstDflashModel *m)
{
  return m->drafter;
}

int
gst_dflash_model_tap_width (GstDflashModel *m)
{
  return m->drafter ? dfl_drafter_geometry_tap_width (dfl_drafter_geometry (m->drafter)) : 0;
}

GstDflashSeq *
gst_dflash_model_seq_new (GstDflashModel *m, guint id, GError **error)
{
  GstDflashSeq *s;

  GST_OBJECT_LOCK (m);
  if (g_hash_table_contains (m->seqs, GUINT_TO_POINTER (id))) {
    GST_OBJECT_UNLOCK (m);
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "sequence %u is already running", id);
    return NULL;
  }
  s = g_new0 (GstDflashSeq, 1);
  s->id = id;
  s->kv = dfl_target_seq_new (m->target);
  s->tokens = g_array_new (FALSE, FALSE, sizeof (int));
  s->tip = g_new0 (float, dfl_target_config (m->target)->hidden);
  g_hash_table_insert (m->seqs, GUINT_TO_POINTER (id), s);
  GST_OBJECT_UNLOCK (m);
  return s;
}

GstDflashSeq *
gst_dflash_model_seq_get (GstDflashModel *m, guint id)
{
  GstDflashSeq *s;

  GST_OBJECT_LOCK (m);
  s = g_hash_table_lookup (m->seqs, GUINT_TO_POINTER (id));
  GST_OBJECT_UNLOCK (m);
  return s;
}

void
gst_dflash_model_seq_remove (GstDflashModel *m, guint id)
{
  GST_OBJECT_LOCK (m);
  g_hash_table_remove (m->seqs, GUINT_TO_POINTER (id));
  GST_OBJECT_UNLOCK (m);
}

void
gst_dflash_model_seq_clear (GstDflashModel *m)
{
  GST_OBJECT_LOCK (m);
  g_hash_table_remove_all (m->seqs);
  GST_OBJECT_UNLOCK (m);
}

DflDrafter *
gst_dflash_model_seq_drafter (GstDflashModel *m, GstDflashSeq *seq, GError **error)
{
  if (!seq->drafter) {
    if (!m->drafter_path) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "the model %s has no drafter (no dflash.safetensors beside it, and none named)",
                   dfl_target_dir (m->target));
      return NULL;
    }
    seq->drafter = dfl_drafter_open (m->drafter_path, error);
  }
  return seq->drafter;
}

GstContext *
gst_dflash_model_context_new (GstDflashModel *m)
{
  GstContext *context = gst_context_new (GST_DFLASH_MODEL_CONTEXT_TYPE, TRUE);
  GstStructure *s = gst_context_writable_structure (context);

  gst_structure_set (s, "model", GST_TYPE_DFLASH_MODEL, m, NULL);
  return context;
}

gboolean
gst_dflash_model_handle_context_query (GstElement *element, GstQuery *query, GstDflashModel *m)
{
  const char *type;
  GstContext *context;

  if (!m || !gst_query_parse_context_type (query, &type)
      || g_strcmp0 (type, GST_DFLASH_MODEL_CONTEXT_TYPE))
    return FALSE;
  context = gst_dflash_model_context_new (m);
  gst_query_set_context (query, context);
  gst_context_unref (context);
  GST_DEBUG_OBJECT (element, "answered a dflash.model context query");
  return TRUE;
}

void
gst_dflash_model_handle_set_context (GstElement *element, GstContext *context,
                                     GstDflashModel **slot)
{
  const GstStructure *s;
  GstDflashModel *m = NULL;

  if (!context || g_strcmp0 (gst_context_get_context_type (context), GST_DFLASH_MODEL_CONTEXT_TYPE))
    return;
  s = gst_context_get_structure (context);
  if (gst_structure_get (s, "model", GST_TYPE_DFLASH_MODEL, &m, NULL) && m) {
    GST_OBJECT_LOCK (element);
    if (!*slot)
      *slot = g_steal_pointer (&m);
    GST_OBJECT_UNLOCK (element);
    g_clear_object (&m);
  }
}

gboolean
gst_dflash_model_find (GstElement *element, GstPad *pad, GstDflashModel **slot)
{
  GstQuery *query;

  if (*slot)
    return TRUE;
  query = gst_query_new_context (GST_DFLASH_MODEL_CONTEXT_TYPE);
  if (gst_pad_peer_query (pad, query)) {
    GstContext *context = NULL;
    gst_query_parse_context (query, &context);
    if (context)
      gst_dflash_model_handle_set_context (element, context, slot);
  }
  gst_query_unref (query);
  if (!*slot) {
    /* the application (or a bin that has one) may answer through set_context */
    gst_element_post_message (element,
        gst_message_new_need_context (GST_OBJECT (element), GST_DFLASH_MODEL_CONTEXT_TYPE));
  }
  return *slot != NULL;
}
