/* gst-dflash — chat templates: a conversation rendered as the prompt text
 * a chat-tuned target was trained on.
 *
 * Hugging Face checkpoints carry their template as a Jinja program in
 * tokenizer_config.json ("chat_template"). The project runs no Jinja: it
 * recognises the ChatML templates of the Qwen families by what they say,
 * and renders those itself, byte for byte what transformers'
 * apply_chat_template gives (tests/chat holds the fixtures). A template it
 * does not recognise is refused with a message naming the file; a folder
 * without a chat_template (models/qwen3-go has none) gets the template of
 * its config.json's model_type (qwen2 → Qwen2.5, qwen3 → Qwen3).
 *
 * Plain C over GLib; no GStreamer.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  DFL_CHAT_QWEN2,   /* ChatML; "You are a helpful assistant." when no system message */
  DFL_CHAT_QWEN25,  /* ChatML; "You are Qwen, created by Alibaba Cloud. …" when none */
  DFL_CHAT_QWEN3,   /* ChatML with <think> blocks and the enable_thinking switch */
} DflChatFamily;

typedef struct {
  const char *role;              /* "system", "user" or "assistant" */
  const char *content;
  const char *reasoning_content; /* Qwen3 assistant turns; NULL: none given */
} DflChatMessage;

typedef struct _DflChatTemplate DflChatTemplate;

/* The template of the checkpoint folder `dir`: tokenizer_config.json's
 * chat_template where the file has one, else config.json's model_type. An
 * error names the file and says what is supported. */
DflChatTemplate *dfl_chat_template_load (const char *dir, GError **error);
/* A template's Jinja text; `origin` names where it came from, for errors. */
DflChatTemplate *dfl_chat_template_new_from_jinja (const char *jinja, const char *origin,
                                                   GError **error);
DflChatTemplate *dfl_chat_template_new (DflChatFamily family, const char *origin);
void dfl_chat_template_free (DflChatTemplate *t);

DflChatFamily dfl_chat_template_family (const DflChatTemplate *t);
/* "qwen2", "qwen2.5", "qwen3" */
const char *dfl_chat_template_name (const DflChatTemplate *t);
/* Where the template was found: "DIR/tokenizer_config.json" or
 * "DIR/config.json (model_type qwen3; no chat_template)" */
const char *dfl_chat_template_origin (const DflChatTemplate *t);

/* The prompt text of `n` messages; `add_generation_prompt` opens the
 * assistant's turn, `enable_thinking` FALSE closes Qwen3's think block
 * empty (the switch is Qwen3's; the other families ignore it). An unknown
 * role, a NULL content or no messages at all is an error. */
char *dfl_chat_template_render (const DflChatTemplate *t, const DflChatMessage *msgs, int n,
                                gboolean add_generation_prompt, gboolean enable_thinking,
                                GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflChatTemplate, dfl_chat_template_free)

G_END_DECLS
