/*-------------------------------------------------------------------------
 *
 * outbox_subs.h
 *		Named subscriptions: their rows in outbox.subscription and the
 *		state of what each has read in outbox.subscription_state,
 *		outbox.subscription_lease and outbox.subscription_key
 *		(outbox_store_subs.c, outbox_store_subs_claim.c, outbox_subs_lease.c,
 *		outbox_subs_promote.c).
 *
 * A subscription is named by its topic and name; the calls that take a
 * message id (complete, fail, extend, retry_dead) find the message among
 * the subscriptions of that name, since a message belongs to one topic.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SUBS_H
#define OUTBOX_SUBS_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "fmgr.h"
#include "datatype/timestamp.h"
#include "utils/array.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

#include "outbox_store.h"
#include "outbox_stream.h"

/* the subscription argument of a call (outbox_api_subs.c) */
extern text *CheckSubscription(FunctionCallInfo fcinfo, int argno);

/* may a claim of a subscription run (outbox_subs_manage.c) */
extern void CheckSubscriptionClaim(text *topic, text *name);
extern void CheckDefaultClaim(text *topic);

/* the subscription a route is made for, made when missing (outbox_subs_manage.c) */
extern void SubsForRoute(text *topic, text *subscription);

/* whether a table, and the tables of 1.4, are there (outbox_subs_marks.c, outbox_store_subs.c) */
extern bool SubsHasTable(const char *relname);
extern bool SubsSchema(void);

/* managing subscriptions (outbox_subs_manage.c) */
extern bool SubsCreate(text *topic, text *name, bool since_given,
					   TimestampTz since, TimestampTz now);
extern bool SubsDrop(text *topic, text *name);
extern bool SubsPause(text *topic, text *name, bool pause, TimestampTz until);
extern bool SubsDropDefault(text *topic, TimestampTz now);
extern bool SubsRestoreDefault(text *topic);
extern bool SubsDefaultDropped(text *topic);
extern bool SubsPauseDefault(text *topic, bool pause, TimestampTz until);
extern bool SubsDefaultHeld(text *topic, TimestampTz now, TimestampTz *until);

/* the outcome of a claim (outbox_store_subs.c) */
extern bool SubsComplete(pg_uuid_t *id, text *owner, text *name);
extern int64 SubsCompleteMany(ArrayType *ids, text *owner, text *name);
extern bool SubsFail(pg_uuid_t *id, text *owner, text *error, text *name,
					 TimestampTz now);
extern bool SubsFailAt(pg_uuid_t *id, text *owner, text *error, text *name,
					   TimestampTz now, TimestampTz retry_at, bool dead);
extern int64 SubsRelease(ArrayType *ids, text *owner, text *name, TimestampTz now);
extern TimestampTz SubsNextDue(text *topic, text *name, TimestampTz now);
extern bool SubsExtend(pg_uuid_t *id, text *owner, int lease_seconds,
					   text *name, TimestampTz now);
extern bool SubsRetryDead(pg_uuid_t *id, text *name, TimestampTz now);
extern int64 SubsRetryDeadTopic(text *topic, text *name, TimestampTz now);
extern void SubsPurgeDead(TimestampTz horizon);

/* leases by range (outbox_subs_lease.c) */
extern bool SubsLeaseRows(void);
extern Datum SubsLeaseIdsLeft(Datum ids, int n, int col);
extern int	SubsLeaseKeys(Datum ids, pg_uuid_t *one, text *owner, Datum **subs,
						  Datum **keys);
/* ordering keys (text) of subscriptions (int4), a growing list */
typedef struct SubsKeySet
{
	int			n;
	int			size;
	Datum	   *subs;
	Datum	   *keys;
} SubsKeySet;

extern int64 SubsLeaseComplete(Datum ids, text *owner, text *name, SubsKeySet *promote);
extern int64 SubsLeaseToState(Datum ids, text *owner, text *name);

/*
 * The messages of a lease row that this backend's claim wrote, among the
 * ids a completion names (outbox_subs_memo.c): memo is the slot, at[i]
 * the index in those ids of the i-th message.
 */
typedef struct LeaseGroup
{
	int			memo;
	int32		sub;
	int64		first_seq;
	TimestampTz until;
	int			n;
	Datum	   *seqs;
	Datum	   *keys;
	bool	   *keynulls;
	int		   *at;
} LeaseGroup;

extern void SubsMemoNote(int32 sub, TimestampTz until, text *owner, int idcol,
						 int seqcol, int keycol, int bycol);
extern void SubsMemoForget(const LeaseGroup *g);
extern int	SubsMemoGroups(Datum *elems, bool *nulls, const bool *known, int nelems,
						   text *owner, LeaseGroup **groups);
extern int64 SubsLeaseExpiredToState(int32 sub, TimestampTz now, TimestampTz low);
/* expiry (outbox_subs_manage.c) */
extern void SubsExpire(TimestampTz now);

/* a position of a topic's stream as a dirty snapshot shows it (outbox_subs_scan.c) */
typedef struct StreamEntry
{
	int64		seq;
	bool		in_progress;	/* its append has not committed yet */
	pg_uuid_t	id;
	text	   *key;			/* ordering key, or NULL */
	TimestampTz available_at;
} StreamEntry;

#define STREAM_COMMITTED	0
#define STREAM_IN_PROGRESS	1
#define STREAM_GONE			2

extern int	SubsReadStream(text *topic, int64 from, int64 upto, int max_fresh,
						   int max_holes, StreamEntry *entries, int64 *end);
extern void SubsProbeStream(text *topic, const int64 *seqs, int n, int *states);
extern int64 StreamAdvance(text *topic, int64 from, int64 upto,
							text *const *keys, int nkeys, bool *open,
							int64 *nkeyed, text **stop_key);

#define HOLE_OPEN			0
#define HOLE_DUE			1
#define HOLE_DONE			2

extern void StreamProbeHoles(text *topic, const int64 *seqs, int n, int *states);

/* a row of outbox.subscription_frontier as a dirty snapshot shows it */
typedef struct FrontierRow
{
	int64		from;			/* the range read: [from, next); -1: not recorded */
	int64		next;
	TransactionId inserting;	/* another transaction in progress inserts it */
	TransactionId deleting;		/* another transaction in progress deletes it */
} FrontierRow;

extern int	SubsReadFrontier(int32 sub, FrontierRow *rows, int max, bool *chain);
extern int64 SubsFrontierFrom(int32 sub);
extern int	SubsFrontierMarks(Datum **subs, Datum **froms);
extern void SubsFrontierCollapsed(int32 sub);

/* the frontier of a subscription and its lock (outbox_subs_frontier.c) */
typedef struct SubsFrontier
{
	int32		sub;
	bool		chain;			/* the rows record their from_seq (1.5) */
	int			nrows;
	FrontierRow *rows;
	int			at;				/* the range read follows rows[at - 1] */
	int64		start;			/* where the claim reads from */
	int64		limit;			/* up to (exclusive): a range a claim that
								 * rolled back left unread; else PG_INT64_MAX */
} SubsFrontier;

extern bool SubsLock(int32 sub);
extern bool SubsTryLock(int32 sub);
extern void SubsUnlock(int32 sub);
extern void SubsFrontierRead(SubsFrontier *f, int32 sub);
extern void SubsFrontierAdvance(SubsFrontier *f, int64 next, TimestampTz now);
extern int64 SubsFrontierFloor(const SubsFrontier *f);
extern void SubsWaitClaims(int32 sub);

/* the locks of a subscription's ordering keys (outbox_subs_keylock.c) */
extern bool SubsKeyTryLock(int32 sub, text *key);
extern void SubsKeyLockMany(int n, Datum *subs, Datum *keys);
extern void SubsKeyLockAll(int n, Datum *subs);

/* at most this many appends in progress passed over by one read of the log */
#define SUBS_MAX_HOLES		1000

/* claiming (outbox_store_subs_claim.c) */
extern int	SubsClaimToTuplestore(const ClaimRequest *req, text *name,
								  TupleDesc tupdesc, Tuplestorestate *store);
extern int	SubsClaimMessages(const ClaimRequest *req, text *name, List **messages);

/*
 * Where this backend's claims of a subscription read its holes from
 * (outbox_subs_marks.c, where the rule is).
 */
typedef struct HoleMark
{
	Oid			relid;
	int32		sub_id;
	int64		from;
	TransactionId changed;		/* the last transaction that changed its holes */
} HoleMark;

/* where a subscription's due reads start: its due hint */
typedef struct SubsHint
{
	bool		set;
	TimestampTz at;				/* where the next read starts */
	TimestampTz walked;			/* when a read last started from the first */
} SubsHint;

/* the due hints shared between backends (outbox_subs_hints.c) */
extern void SubsHintsInit(void);
extern bool SubsSharedHintGet(Oid relid, int32 sub, SubsHint *hint);
extern void SubsSharedHintPut(Oid relid, int32 sub, const SubsHint *hint);

/* what this backend remembers of the subscriptions (outbox_subs_marks.c) */
extern Oid	SubsStateRelid(void);
extern HoleMark *SubsHoleMark(int32 sub);
extern int64 SubsHolesFrom(int32 sub);
extern TimestampTz SubsDueHint(int32 sub, TimestampTz now, bool *hinted,
							   bool *held);
extern void SubsDueHintNote(int32 sub, TimestampTz now, bool hinted, bool keep,
							bool full, TimestampTz last);
extern bool SubsLeaseCheckDue(int32 sub, TimestampTz now, TimestampTz *low);
extern void SubsLeaseCheckAgain(int32 sub, TimestampTz low);
extern TimestampTz SubsLeasesSeen(int32 sub, TimestampTz now);
extern int	SubsHoleMarks(Datum **subs, Datum **froms);
extern int	SubsLeaseMarks(TimestampTz now, Datum **subs, Datum **seen);

/* claiming across topics (outbox_subs_across.c) */
extern int	SubsClaimAcross(const ClaimRequest *req, text *name, TupleDesc tupdesc,
							Tuplestorestate *store);

/* the key heads to hand out again after messages left their key (outbox_subs_promote.c) */
extern void SubsPromoteKeys(int nkeys, Datum *sub_ids, Datum *keys);
extern void SubsPromoteReturned(int subcol, int keycol, int morecol);

/*
 * Column col (a position) between the least and the greatest of the array
 * arr: with the subscription, a range of a primary key that a plan takes
 * as its index condition whatever the statistics (an array alone may be
 * left to a filter over every row of the subscription, the deleted ones a
 * held snapshot keeps included).
 */
#define SUBS_WITHIN(col, arr) \
	col " OPERATOR(pg_catalog.>=) (SELECT pg_catalog.min(s) FROM pg_catalog.unnest(" arr ") s)" \
	" AND " col " OPERATOR(pg_catalog.<=) (SELECT pg_catalog.max(s) FROM pg_catalog.unnest(" arr ") s)"

/*
 * When message m (an alias of outbox.message) falls due in a named
 * subscription: its available_at, unless the topic's default subscription
 * has attempted it (attempts above 0), whose failures move available_at to
 * its own next attempt.  Such a message was due when the default
 * subscription first claimed it, so its created_at stands in: a failure
 * there does not delay it here.
 */
#define SUBS_DUE_AT(m) \
	"(CASE WHEN " m ".attempts OPERATOR(pg_catalog.>) 0 THEN " m ".created_at" \
	" ELSE " m ".available_at END)"

/*
 * The end of a statement that leased state rows: the rows of
 * outbox.message of u (a CTE returning the state rows' id, attempts,
 * leased_until and lease_owner), in position order, with the
 * subscription's own state and err as last_error.  The messages are
 * looked up by their ids as an array that the primary key takes whole
 * (see SUBS_LEASE_ROWS in outbox_store_subs_claim.c).
 */
#define SUBS_LEASED_MESSAGES_AND(err, extra) \
	" SELECT m.id, m.topic, m.event_type, m.payload, m.created_at," \
	" " SUBS_DUE_AT("m") ", u.attempts, u.leased_until, u.lease_owner," \
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.timestamptz, " err "," \
	" m.seq, false, m.ordering_key" extra \
	" FROM u JOIN outbox.message m ON m.id OPERATOR(pg_catalog.=) u.id" \
	" WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT u.id FROM u)) ORDER BY m.seq"
#define SUBS_LEASED_MESSAGES(err) SUBS_LEASED_MESSAGES_AND(err, "")

#endif							/* OUTBOX_SUBS_H */
