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
extern text *CheckName(Datum value, bool isnull, const char *what);
extern void CheckNotNull(bool isnull, const char *what);
extern int	CheckBatchSize(Datum value, bool isnull);
extern int	CheckLeaseSeconds(Datum value, bool isnull);
extern text *ClipErrorText(const char *str, int len);

/* identifiers (outbox_uuid.c) */
extern void GenerateUuidV7(pg_uuid_t *uuid);

/* backoff (outbox_backoff.c) */
extern int64 BackoffDelaySeconds(int attempts, int base_seconds, int max_seconds);

/* envelope (outbox_envelope.c) */
extern Jsonb *BuildEnvelope(pg_uuid_t *id, text *event_type, TimestampTz created_at,
							Jsonb *payload);
extern Jsonb *BuildTruncatedEnvelope(pg_uuid_t *id, text *event_type,
									 TimestampTz created_at);
extern char *FormatIsoTimestamp(TimestampTz ts);
extern const char *EnvelopeTimestampProblem(TimestampTz ts);

/* the message store (outbox_store.c) */
typedef struct ClaimRequest
{
	text	   *owner;
	text	   *topic;			/* NULL: every topic */
	int			batch_size;
	int			lease_seconds;
	int			max_attempts;
	TimestampTz now;
} ClaimRequest;

extern void StoreAppend(text *topic, text *event_type, Jsonb *payload,
						pg_uuid_t *id, bool is_new, TimestampTz available_at);
extern void StoreAppendBatch(text *topic, text *event_type, Datum ids,
							 Datum payloads, TimestampTz available_at);
/* what delivery needs of a claimed message */
typedef struct ClaimedMessage
{
	pg_uuid_t	id;
	text	   *topic;
	text	   *event_type;
	TimestampTz created_at;
	Jsonb	   *payload;
	int			attempts;
	TimestampTz leased_until;
} ClaimedMessage;

/* a row of outbox.routes */
typedef struct OutboxRoute
{
	char	   *topic;
	bool		remote;			/* remote command, else NOTIFY */
	char	   *channel;
	char	   *server;
	char	   *command;
	char	   *created_by;
} OutboxRoute;

#define OUTBOX_MESSAGE_MAX_COLS	32

extern int	StoreClaim(const ClaimRequest *req, TupleDesc tupdesc,
					   Tuplestorestate *store, List **messages);
extern int64 StoreComplete(Datum ids, bool many, text *owner,
						   TimestampTz now);
extern bool StoreFail(pg_uuid_t *id, text *owner, text *error, TimestampTz now);
extern bool StoreExtend(pg_uuid_t *id, text *owner, int lease_seconds,
						TimestampTz now);
extern int64 StoreRetryDead(pg_uuid_t *id, text *topic, TimestampTz now);
extern int64 StorePurge(TimestampTz horizon, int64 max_rows);
extern bool StoreConsumeOnce(text *consumer, pg_uuid_t *message_id,
							 TimestampTz now);
extern Jsonb *StoreEnvelopeById(pg_uuid_t *id);
extern int64 StoreRelease(Datum ids, text *owner);
extern int	StoreClaimDelivered(const ClaimRequest *req, List **messages);
extern void StoreUndeliver(pg_uuid_t *id, text *owner, TimestampTz lease_end);
extern TimestampTz StoreNextDue(text *topic, TimestampTz now);
extern void StoreRouteSet(text *topic, const char *target, text *channel,
						  const char *server, text *command, Oid creator);
extern bool StoreRouteDelete(text *topic);
extern List *StoreRouteList(text *topic);
extern List *StoreRoutedTopics(void);

typedef struct StoreIdentity
{
	Oid			userid;
	int			sec_context;
} StoreIdentity;

extern bool StoreTryLock(void);
extern void StoreBecomeOwner(StoreIdentity *save);
extern void StoreRestoreIdentity(const StoreIdentity *save);

/* delivery: routes, one delivery round, drain_once (outbox_route.c, outbox_drain.c) */
extern bool DrainDatabaseRound(Oid delivering_role, TimestampTz *next_wake,
							   int64 *delivered, int64 *failed);

/* NOTIFY target (outbox_notify.c) */
#define OUTBOX_NOTIFY_MAX_BYTES		7999	/* pg_notify payloads stay below 8000 bytes */
extern void CheckChannel(text *channel);
extern bool NotifyDeliver(const char *channel, ClaimedMessage *m, char **error);

/* remote PostgreSQL target (outbox_remote.c) */
extern void RemoteCheckCommand(const char *command);
extern void RemoteCheckRoute(const char *server_name, Oid creator);
extern bool RemoteDeliver(const char *server_name, Oid userid,
						  bool require_password, const char *command,
						  const char *envelope, const char *topic,
						  TimestampTz deadline, char **error);
extern void RemoteDisconnectAll(void);

/* the extension, as CREATE EXTENSION and shared_preload_libraries name it */
#define OUTBOX_EXTENSION_NAME		"krizaka_outbox"

/* waking the worker at commit (outbox_wakeup.c) */
#include "outbox_wakeup.h"

#endif							/* OUTBOX_H */
