/*-------------------------------------------------------------------------
 *
 * outbox.h
 *		Declarations shared between the source files of krizaka_outbox.
 *
 * Glossary:
 *	message		a row of outbox.message
 *	due			neither delivered nor dead, available_at reached, no valid lease
 *	lease		the right of one owner to deliver a claimed message until
 *				leased_until
 *	dead		attempts exhausted; kept with its last error until revived or
 *				purged
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_H
#define OUTBOX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* Limits that are part of the SQL contract */
#define OUTBOX_NAME_MAX_CHARS	200		/* topic, type, owner, consumer, channel */
#define OUTBOX_ERROR_MAX_BYTES	4096	/* last_error, cut on a character boundary */

/* settings, and whether the library is preloaded (outbox_guc.c) */
#include "outbox_guc.h"

/* argument checks (outbox_validate.c) */
#include "outbox_validate.h"

/* envelope (outbox_envelope.h) */
#include "outbox_envelope.h"

/*
 * the message store (outbox_store*.c, outbox_spi.c) and the identity it is
 * used under (outbox_identity.c)
 */
#include "outbox_identity.h"
#include "outbox_store.h"
#include "outbox_store_routes.h"

/* delivery: drain, NOTIFY and remote routes (outbox_delivery.h) */
#include "outbox_delivery.h"

/* the extension, as CREATE EXTENSION and shared_preload_libraries name it */
#define OUTBOX_EXTENSION_NAME		"krizaka_outbox"

/* waking the worker at commit (outbox_wakeup.c) */
#include "outbox_wakeup.h"

#endif							/* OUTBOX_H */
