/*-------------------------------------------------------------------------
 *
 * outbox_validate.h
 *		Checks of the arguments the SQL functions receive
 *		(outbox_validate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_VALIDATE_H
#define OUTBOX_VALIDATE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/array.h"
#include "utils/uuid.h"

extern void CheckNotNull(bool isnull, const char *what);
extern text *CheckName(Datum value, bool isnull, const char *what);
extern pg_uuid_t *CheckUuid(Datum value, bool isnull, const char *what);
extern ArrayType *CheckArray(Datum value, bool isnull, const char *what,
							 Oid elemtype, int *nelems);
extern TimestampTz CheckAvailableAt(Datum value, bool isnull, TimestampTz now);
extern int	CheckBatchSize(Datum value, bool isnull);
extern int	CheckLeaseSeconds(Datum value, bool isnull);
extern text *CheckErrorText(Datum value, bool isnull);
extern TimestampTz CheckPurgeHorizon(Datum older_than, bool isnull,
									 TimestampTz now);
extern int64 CheckMaxRows(Datum value, bool isnull);
extern char *CheckServerName(Datum value, bool isnull);
extern char *CheckCommand(Datum value, bool isnull);
extern text *ClipErrorText(const char *str, int len);

#endif							/* OUTBOX_VALIDATE_H */
