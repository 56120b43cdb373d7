/* gst-dflash — what every element shares: properties held in instance
 * fields, and the errors every element posts alike.
 *
 * Most of an element's properties are a field of its instance that
 * set_property writes and get_property reads, each under the object lock
 * (as GStreamer's elements do: the streaming thread copies a property to a
 * local under the same lock). Installed with the field's offset, such a
 * property needs no case of its own in either function: the element's
 * set/get_property hand every property to these first and handle only
 * what is left (a figure computed when read).
 *
 * The field's C type follows the property's value type: gint (int, enum),
 * guint, gboolean, gdouble, guint64, char * (string: owned, freed on replace; the
 * element frees it in finalize).
 */
#pragma once

#include <gst/gst.h>

#include "gstdflashcaps.h"

G_BEGIN_DECLS

/* Install `pspec` on `klass` as property `prop_id`, held in the field at
 * `offset` of the instance (G_STRUCT_OFFSET, or G_PRIVATE_OFFSET for a
 * field of the private struct). */
void gst_dflash_install_field_property (GObjectClass *klass, guint prop_id, GParamSpec *pspec,
                                        gssize offset);
/* set_property and get_property for the field properties: TRUE where
 * `pspec` was one (and the value is set). */
gboolean gst_dflash_field_property_set (GObject *object, const GValue *value, GParamSpec *pspec);
gboolean gst_dflash_field_property_get (GObject *object, GValue *value, GParamSpec *pspec);
/* GObjectClass::set_property and ::get_property for a class whose every
 * property is a field property. */
void gst_dflash_field_set_property (GObject *object, guint prop_id, const GValue *value,
                                    GParamSpec *pspec);
void gst_dflash_field_get_property (GObject *object, guint prop_id, GValue *value,
                                    GParamSpec *pspec);

/* The properties several elements have: `backend` (where it runs,
 * GstDflashBackend, default auto, mutable in READY) and `busy-time` (a
 * guint64 figure in nanoseconds, read-only), each with its element's blurb. */
void gst_dflash_install_backend_property (GObjectClass *klass, guint prop_id, const char *blurb,
                                          gssize offset);
void gst_dflash_install_busy_time_property (GObjectClass *klass, guint prop_id,
                                            const char *blurb, gssize offset);
/* Register an element's enum type once (its get_type's body). */
GType gst_dflash_register_enum (GType *type, const char *name, const GEnumValue *values);

/* The backend property: FALSE, with an element error, where this build
 * lacks the back end it names. */
gboolean gst_dflash_element_check_backend_built (GstElement *element, GstDflashBackend backend);
/* The backend property of an element that runs the target (tapsource, the
 * verifier): FALSE, with an element error, where this build lacks it or it
 * is vulkan (the elements put no target on Vulkan; `advice` says what to do). */
gboolean gst_dflash_element_check_target_backend (GstElement *element, GstDflashBackend backend,
                                                  const char *advice);
/* Post the error of an element that found no dflash model upstream. */
void gst_dflash_element_error_no_model (GstElement *element);

G_END_DECLS
