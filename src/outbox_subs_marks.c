/*-------------------------------------------------------------------------
 *
 * outbox_subs_marks.c
 *		What this backend remembers of the named subscriptions it claims
 *		from, so that its claims do not read again what a held snapshot
 *		keeps: where their due reads start, where to look for leases that
 *		ran out, and where to read the holes from.
 *
 * Under a held snapshot an index keeps an entry for every row deleted,
 * and for every row version that left it, since the snapshot was taken;
 * a claim that read such an index from its first entry would pass them
 * all, and slow with the snapshot's age.  Each mark here says where a
 * read may start without missing anything.  They live in the backend's
 * memory, a few subscriptions each, the least recently used replaced: a
 * backend that has none reads from the first entry, as every claim did;
 * the due hints are also shared between backends (outbox_subs_hints.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_subs.h"

/* how often a subscription's claims look for leases that ran out */
#define SUBS_LEASE_CHECK_INTERVAL	USECS_PER_SEC
#define SUBS_LEASE_FULL_INTERVAL	(60 * USECS_PER_SEC)

/*
 * When this backend last looked for the leases of a subscription that ran
 * out: a few subscriptions, the least recently looked at replaced.
 */
typedef struct LeaseCheck
{
	int32		sub_id;
	TimestampTz checked;		/* every lease that ended before was seen */
	TimestampTz full;			/* when the look last started from the first */
} LeaseCheck;

#define SUBS_LEASE_CHECKS	16
static LeaseCheck lease_checks[SUBS_LEASE_CHECKS];

/*
 * Is it time to look for the leases of subscription sub that ran out?  At
 * most once a second; *low is where the look starts: after the leases
 * that ended before the last look, which saw them (their index keeps the
 * entries of every lease completed since the oldest snapshot still held),
 * or from the first once a minute, for a lease that a look passed over
 * while another transaction held its row.
 */
bool
SubsLeaseCheckDue(int32 sub, TimestampTz now, TimestampTz *low)
{
	LeaseCheck *c = NULL;
	int			i;

	for (i = 0; i < SUBS_LEASE_CHECKS; i++)
	{
		if (lease_checks[i].sub_id == sub)
		{
			c = &lease_checks[i];
			break;
		}
		if (c == NULL || lease_checks[i].checked < c->checked)
			c = &lease_checks[i];
	}
	if (c->sub_id != sub || c->checked > now || c->full > now ||
		now - c->full >= SUBS_LEASE_FULL_INTERVAL)
	{
		c->sub_id = sub;
		c->full = now;
		*low = DT_NOBEGIN;
	}
	else if (now - c->checked < SUBS_LEASE_CHECK_INTERVAL)
		return false;
	else
		*low = c->checked;
	c->checked = now;
	return true;
}

/*
 * Where this backend's next due read of a subscription starts.  A row
 * leased or completed leaves the due rows' index by a new row version or
 * a deletion, and its entry stays as long as the oldest snapshot still
 * held: a backlog's due reads from the first entry each passed every row
 * taken before (100,000 retried messages drained at 6,544 msg/s under a
 * held snapshot against about 30,000 without).  So when a due read filled
 * its batch, the next one reads on from the last available_at it read
 * (the hint): what lies before was taken by this read or by the reads it
 * raced, or locked by another transaction when read.  The backend keeps
 * following it, also when a read from it comes out short (an idle
 * subscription), and reads from the first due row once a second, so a row
 * due before it meanwhile (a claim that rolled back, a row moved by hand)
 * waits at most that long.  A subscription with keyed rows takes no hint
 * (see stmt_keyed_rows in outbox_store_subs_due.c).
 */
typedef struct DueHint
{
	Oid			relid;
	int32		sub_id;
	bool		set;
	TimestampTz at;				/* where the next read starts */
	TimestampTz walked;			/* when a read last started from the first */
} DueHint;

#define SUBS_DUE_HINT_MAX_AGE	USECS_PER_SEC
#define SUBS_DUE_HINTS		16
static DueHint due_hints[SUBS_DUE_HINTS];
static int	due_hints_next = 0;

static DueHint *
obx_due_hint_find(Oid relid, int32 sub)
{
	int			i;

	for (i = 0; i < SUBS_DUE_HINTS; i++)
		if (due_hints[i].relid == relid && due_hints[i].sub_id == sub)
			return &due_hints[i];
	return NULL;
}

/* this backend's hint of subscription sub, made (not set) when it has none */
static DueHint *
obx_due_hint_make(Oid relid, int32 sub, TimestampTz now)
{
	DueHint    *h = obx_due_hint_find(relid, sub);

	if (h == NULL)
	{
		h = &due_hints[due_hints_next];
		due_hints_next = (due_hints_next + 1) % SUBS_DUE_HINTS;
		h->relid = relid;
		h->sub_id = sub;
		h->set = false;
		h->walked = now;
	}
	return h;
}

/* Whether a due read at now follows hint h */
static bool
obx_due_hint_usable(const DueHint *h, TimestampTz now)
{
	return h != NULL && h->set && h->walked <= now &&
		now - h->walked < SUBS_DUE_HINT_MAX_AGE;
}

/*
 * Where the due read of subscription sub at now starts: the hint
 * (*hinted), or the first due row (DT_NOBEGIN); *held says whether this
 * backend has a hint at all, a second old or not.  When its own is not
 * usable, the hint another backend published (outbox_subs_hints.c) is
 * taken if it comes from a later read from the first due row: a new
 * connection per claim, or each of a pool's, reads on from the others'.
 */
TimestampTz
SubsDueHint(int32 sub, TimestampTz now, bool *hinted, bool *held)
{
	Oid			relid = SubsStateRelid();
	DueHint    *h = obx_due_hint_find(relid, sub);
	SubsHint	shared;

	if (!obx_due_hint_usable(h, now) && SubsSharedHintGet(relid, sub, &shared) &&
		shared.set && shared.walked <= now && now - shared.walked < SUBS_DUE_HINT_MAX_AGE &&
		(h == NULL || h->walked < shared.walked))
	{
		h = obx_due_hint_make(relid, sub, now);
		h->set = true;
		h->at = shared.at;
		h->walked = shared.walked;
	}
	*held = h != NULL && h->set;
	*hinted = obx_due_hint_usable(h, now);
	return *hinted ? h->at : DT_NOBEGIN;
}

/* Publish this backend's hint h of subscription sub, for the others */
static void
obx_due_hint_publish(const DueHint *h)
{
	SubsHint	shared;

	shared.set = h->set;
	shared.at = h->at;
	shared.walked = h->walked;
	SubsSharedHintPut(h->relid, h->sub_id, &shared);
}

/*
 * After a due read of sub at now (from a hint, when hinted) that read up
 * to last (DT_NOBEGIN: nothing).  When it filled its batch (full), last is
 * the next read's hint; a read after that keeps the hint, moved on to
 * last, and so does one from the first due row (once the hint is a second
 * old), which took every row due before it; unless keep is false (the
 * subscription has keyed rows): then there is none.
 */
void
SubsDueHintNote(int32 sub, TimestampTz now, bool hinted, bool keep, bool full,
				TimestampTz last)
{
	Oid			relid = SubsStateRelid();
	DueHint    *h = obx_due_hint_find(relid, sub);
	DueHint		before;

	if (!keep)
	{
		if (h != NULL && h->set)
		{
			h->set = false;
			obx_due_hint_publish(h);
		}
		return;
	}
	h = obx_due_hint_make(relid, sub, now);
	before = *h;
	if (full || !h->set || last > h->at)
		h->at = last;
	h->set = true;
	if (!hinted)
		h->walked = now;
	if (!before.set || before.at != h->at || before.walked != h->walked)
		obx_due_hint_publish(h);
}

/*
 * Where this backend's claims of a subscription start reading its holes.
 * Each hole handed out or dropped leaves an entry in the holes' index that
 * a held snapshot keeps, and a read from the first hole would pass them
 * all, every claim.  No hole is ever made below the mark: holes are made
 * only by reads of the log, under the subscription's lock, from the
 * frontier's start on, or in a range a claim still in progress read,
 * which its rollback leaves to be read again (SubsFrontierFloor).  Nor
 * does one come back below it: the first hole a claim finds is taken
 * before it hands out or drops any, so its rollback restores only holes
 * at or above it, and a hole another transaction hands out is a hole to
 * this one's snapshot until that one commits.  So the mark is the least
 * of the frontier's floor, read first, and the first hole found after;
 * and since no hole is made below any mark once set, the greatest mark
 * set stands (claims run in READ COMMITTED: each read sees what committed
 * before it).  A claim in a transaction that already handed out or
 * dropped holes sets none: it no longer sees them, yet they come back if
 * it rolls back.
 * Keyed by the table too: a table made anew numbers its subscriptions
 * from 1 again.
 */

#define SUBS_HOLE_MARKS		16
static HoleMark hole_marks[SUBS_HOLE_MARKS];
static int	hole_marks_next = 0;

/* Is the table outbox.relname there? */
bool
SubsHasTable(const char *relname)
{
	Oid			nsp = get_namespace_oid("outbox", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid(relname, nsp));
}

/* The table the marks are of: a table made anew numbers its subscriptions from 1 again. */
Oid
SubsStateRelid(void)
{
	return get_relname_relid("subscription_state", get_namespace_oid("outbox", false));
}

/* The hole mark of subscription sub of table relid, or NULL. */
static HoleMark *
obx_hole_mark_find(Oid relid, int32 sub)
{
	int			i;

	for (i = 0; i < SUBS_HOLE_MARKS; i++)
		if (hole_marks[i].relid == relid && hole_marks[i].sub_id == sub)
			return &hole_marks[i];
	return NULL;
}

HoleMark *
SubsHoleMark(int32 sub)
{
	Oid			relid = SubsStateRelid();
	HoleMark   *m = obx_hole_mark_find(relid, sub);

	if (m != NULL)
		return m;
	m = &hole_marks[hole_marks_next];
	hole_marks_next = (hole_marks_next + 1) % SUBS_HOLE_MARKS;
	m->relid = relid;
	m->sub_id = sub;
	m->from = PG_INT64_MIN;
	m->changed = InvalidTransactionId;
	return m;
}

/*
 * The look at the leases of sub that ran out filled the claim's batch, and
 * may have left some: the next claim looks again, from low.
 */
void
SubsLeaseCheckAgain(int32 sub, TimestampTz low)
{
	int			i;

	for (i = 0; i < SUBS_LEASE_CHECKS; i++)
	{
		LeaseCheck *c = &lease_checks[i];

		if (c->sub_id != sub)
			continue;
		if (low == DT_NOBEGIN)
			c->full -= SUBS_LEASE_FULL_INTERVAL;
		else
			c->checked = low - SUBS_LEASE_CHECK_INTERVAL;
	}
}

/*
 * Before when every lease of subscription sub that ran out was seen by a
 * claim of this backend (DT_NOBEGIN: not known): those are taken over,
 * dead, or held by another transaction when the look came, which the look
 * from the first, once a minute, finds.
 */
TimestampTz
SubsLeasesSeen(int32 sub, TimestampTz now)
{
	int			i;

	for (i = 0; i < SUBS_LEASE_CHECKS; i++)
	{
		const LeaseCheck *c = &lease_checks[i];

		if (c->sub_id == sub && c->checked <= now && c->full <= now &&
			now - c->full < SUBS_LEASE_FULL_INTERVAL)
			return c->checked;
	}
	return DT_NOBEGIN;
}

/*
 * Where this backend's claims of subscription sub read its holes from
 * (PG_INT64_MIN: from the first); see HoleMark.
 */
int64
SubsHolesFrom(int32 sub)
{
	HoleMark   *m = obx_hole_mark_find(SubsStateRelid(), sub);

	return m != NULL ? m->from : PG_INT64_MIN;
}

/*
 * The hole marks of this backend, for a statement that reads several
 * subscriptions: their sub_ids in *subs and marks in *froms (palloc'd, as
 * int4 and int8 Datums).  Returns how many.
 */
int
SubsHoleMarks(Datum **subs, Datum **froms)
{
	Oid			relid = SubsStateRelid();
	int			n = 0;
	int			i;

	*subs = palloc(sizeof(Datum) * SUBS_HOLE_MARKS);
	*froms = palloc(sizeof(Datum) * SUBS_HOLE_MARKS);
	for (i = 0; i < SUBS_HOLE_MARKS; i++)
	{
		if (hole_marks[i].relid != relid || hole_marks[i].sub_id == 0)
			continue;
		(*subs)[n] = Int32GetDatum(hole_marks[i].sub_id);
		(*froms)[n++] = Int64GetDatum(hole_marks[i].from);
	}
	return n;
}

/* The same for the lease looks, as SubsLeasesSeen tells them at now. */
int
SubsLeaseMarks(TimestampTz now, Datum **subs, Datum **seen)
{
	int			n = 0;
	int			i;

	*subs = palloc(sizeof(Datum) * SUBS_LEASE_CHECKS);
	*seen = palloc(sizeof(Datum) * SUBS_LEASE_CHECKS);
	for (i = 0; i < SUBS_LEASE_CHECKS; i++)
	{
		TimestampTz t;

		if (lease_checks[i].sub_id == 0)
			continue;
		t = SubsLeasesSeen(lease_checks[i].sub_id, now);
		if (t == DT_NOBEGIN)
			continue;
		(*subs)[n] = Int32GetDatum(lease_checks[i].sub_id);
		(*seen)[n++] = TimestampTzGetDatum(t);
	}
	return n;
}
