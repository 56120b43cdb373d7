/* gst-dflash — embedding the speculative loop in an application.
 *
 *   GST_PLUGIN_PATH=<where libgstdflash.so is> embed-pipeline [PROMPT]
 *
 * Builds the pipeline from a launch description, prints the text as the
 * verifier produces it (through a fakesink's handoff), one line of figures a
 * round from the verifier's element messages, and the summary at EOS. An
 * ERROR on the bus ends it with exit status 1.
 */
#include <gst/gst.h>
#include <stdio.h>

static void
on_text (GstElement *sink, GstBuffer *buf, GstPad *pad, gpointer data)
{
  GstMapInfo map;

  if (gst_buffer_map (buf, &map, GST_MAP_READ)) {
    fwrite (map.data, 1, map.size, stdout);
    fflush (stdout);
    gst_buffer_unmap (buf, &map);
  }
}

int
main (int argc, char **argv)
{
  GstElement *pipeline, *sink, *src;
  GstBus *bus;
  GError *error = NULL;
  gboolean ok = TRUE, done = FALSE;

  gst_init (&argc, &argv);
  pipeline = gst_parse_launch ("tapsource name=src max-new-tokens=32 ! queue ! ctxsettle ! queue ! "
                               "dflashblock ! selector ! verifier ! fakesink name=text "
                               "signal-handoffs=true sync=false", &error);
  /* a description with an element that is not there parses to a partial
   * pipeline and an error: the error is what counts */
  if (!pipeline || error) {
    fprintf (stderr, "embed-pipeline: %s\n", error ? error->message : "no pipeline");
    g_clear_error (&error);
    gst_clear_object (&pipeline);
    return 1;
  }
  if (argc > 1) {
    src = gst_bin_get_by_name (GST_BIN (pipeline), "src");
    g_object_set (src, "prompt", argv[1], NULL);
    gst_object_unref (src);
  }
  sink = gst_bin_get_by_name (GST_BIN (pipeline), "text");
  g_signal_connect (sink, "handoff", G_CALLBACK (on_text), NULL);
  gst_object_unref (sink);

  bus = gst_element_get_bus (pipeline);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  while (!done) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
    const GstStructure *s = gst_message_get_structure (msg);
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ELEMENT:
        if (gst_structure_has_name (s, "dflash-round")) {
          int drafted = 0, accepted = 0;
          gst_structure_get (s, "drafted", G_TYPE_INT, &drafted, "accepted", G_TYPE_INT, &accepted, NULL);
          fprintf (stderr, "[round: %d drafted, %d accepted]\n", drafted, accepted);
        } else if (gst_structure_has_name (s, "dflash-summary")) {
          char *text = gst_structure_to_string (s);
          fprintf (stderr, "\n%s\n", text);
          g_free (text);
        }
        break;
      case GST_MESSAGE_ERROR:
        gst_message_parse_error (msg, &error, NULL);
        fprintf (stderr, "embed-pipeline: %s\n", error->message);
        g_error_free (error);
        ok = FALSE;
        done = TRUE;
        break;
      default:
        done = TRUE;
        break;
    }
    gst_message_unref (msg);
  }
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (pipeline);
  return ok ? 0 : 1;
}
