/*-------------------------------------------------------------------------
 *
 * outbox_uuid.h
 *		UUIDv7 message ids (outbox_uuid.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_UUID_H
#define OUTBOX_UUID_H

#include "postgres.h"

#include "utils/uuid.h"

extern void GenerateUuidV7(pg_uuid_t *uuid);

#endif							/* OUTBOX_UUID_H */
