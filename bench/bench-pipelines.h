/* gst-dflash — what the benchmarks of whole pipelines share (bench-batch,
 * bench-pipeline): their common options, the prompts they run, the elements
 * registered in-process and a run to EOS with the verifier's figures. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* The options every pipeline benchmark takes. */
typedef struct {
  char *model;      /* --model: the target folder, NULL for tapsource's default */
  int n_prompts;    /* --prompts: how many prompts (sequences) to run */
  int max_new;      /* --max-new: new tokens a prompt */
} DflBenchPipelineArgs;

/* Parses argv with the common options, `extra` (NULL-terminated, may be
 * NULL) and GStreamer's; registers the elements in this process. FALSE with
 * the reason printed as "prog: …" where the options are bad (fewer than one
 * prompt or new token included). */
gboolean dfl_bench_pipeline_init (const char *prog, const char *summary, const GOptionEntry *extra,
                                  DflBenchPipelineArgs *args, int *argc, char ***argv);
void dfl_bench_pipeline_args_clear (DflBenchPipelineArgs *args);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (DflBenchPipelineArgs, dfl_bench_pipeline_args_clear)

/* A file of `n` prompts (short Go openings, in turn), one a line, in a
 * fresh temporary folder; NULL with the reason printed. */
char *dfl_bench_prompts_file (const char *prog, int n);
/* Removes the file and its folder. */
void dfl_bench_prompts_file_remove (char *file);

/* Parses `desc` and plays it to EOS: its wall seconds in `wall` and a copy
 * of the verifier's dflash-summary in `summary` (NULL where none came).
 * The pipeline as it ended, for the caller to read its elements' figures
 * before dfl_bench_stop (); NULL with the parse or bus error printed as
 * "prog: …" (the pipeline, if any, stopped and freed). */
GstElement *dfl_bench_launch (const char *prog, const char *desc, double *wall,
                              GstStructure **summary);
/* Sets a launched pipeline to NULL and frees it. */
void dfl_bench_stop (GstElement *pipeline);

G_END_DECLS
