/* gst-dflash — the spec tests' fixtures: the tiny checkpoints and the
 * random sidecar beside one. */
#pragma once

#include "drafter.h"
#include "target.h"

/* The checkpoint tests/fixtures/qwen3/<variant> on the host. */
DflTarget *spec_fixture_target (const char *variant);
/* The sidecar beside the target's checkpoint, checked against it. */
DflDrafterWeights *spec_fixture_drafter (const DflTarget *t);
