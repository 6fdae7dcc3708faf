/*-------------------------------------------------------------------------
 *
 * driver.c
 *		The consumers of the benchmark (bench/run), where pgbench cannot
 *		express the workload: pull workers that stop when nothing is left,
 *		NOTIFY drains timed at the listener, and W8's consumers with the
 *		snapshot they hold and the figures they sample.
 *
 *	driver pull SYSTEM conninfo topic workers batch total [subscriptions]
 *		SYSTEM is one of
 *		  floor    bare UPDATE of `batch` rows by key range per statement
 *		           (worker k takes batches k, k + workers, ...; `total` rows)
 *		  plain    the plain-SQL outbox of bench/plain.sql: one claim
 *		           statement, then one UPDATE that completes the whole batch
 *		  krizaka  outbox.complete_and_claim: the batch before completed
 *		           in the call that claims the next
 *		  krizaka2 outbox.claim, then outbox.complete_many of the batch
 *		  krizaka2p krizaka2 with the complete_many on a second connection
 *		           of the worker's, as a pool in transaction mode may hand
 *		           each call another server connection
 *		  krizakaa krizaka across all topics (its topic NULL)
 *		  pgq      PgQ: worker k consumes queue "<topic>_<k>" as consumer
 *		           "bench": next_batch, get_batch_events, finish_batch
 *		Every statement runs in its own transaction (autocommit).  A worker
 *		stops when it gets nothing.  Prints one line:
 *		  "pull <system> messages=N seconds=S rate=R"
 *		With subscriptions (krizaka, krizaka2 and krizaka2p), a comma-separated
 *		list of named subscriptions of topic: each gets `workers` workers of
 *		its own, all started together, which pass it as the subscription
 *		argument of every call and consume `total` messages of it.  Prints
 *		one line per subscription, its time running until its last worker
 *		stopped:
 *		  "pull <system> subscription=<name> messages=N seconds=S rate=R"
 *		and, with more than one, the whole run:
 *		  "pull <system> subscriptions=K messages=N seconds=S rate=R"
 *
 *	driver w8 SYSTEM conninfo topic workers batch clean hold recovery csv [nohold]
 *		The consumers of W8 (a held xmin horizon) while producers run
 *		beside them (pgbench -R, started by bench/run): `workers` workers
 *		consume for clean + hold + recovery seconds (multiples of 5); when
 *		the clean phase ends this program opens a REPEATABLE READ
 *		transaction on another connection, reads public.bench_unrelated,
 *		and keeps it open for `hold` seconds.  SYSTEM is krizaka, krizaka2,
 *		krizakaa, plain or pgq as above (pgq: the queue is `topic` itself;
 *		krizakaa claims across all topics), or krizakas: krizaka through
 *		the named subscription "w8" of topic; their workers poll
 *		again after POLL_IDLE_MS when they get nothing, or krizaka-worker:
 *		the background worker delivers to a NOTIFY route and one listener
 *		on channel `topic` counts what arrives (consumed = delivered;
 *		`workers` must be 1).  Every SAMPLE_SECONDS a line goes to the csv
 *		file: offered and consumed per second, backlog (produced - consumed; the
 *		producers' business rows count what was produced), the claims'
 *		latency (the claim call; pgq: next_batch + get_batch_events) and
 *		the size of the queue's tables with their indexes and TOAST.  At
 *		the end one line of key=value figures, per phase and at release.
 *		With nohold no snapshot is taken: a control run of the same shape.
 *
 *	driver notify conninfo topic channel total mode
 *		LISTENs on channel, then starts the delivery of `total` messages
 *		already appended to the routed topic, and waits until all their
 *		notifications arrived (at most 10 s without one).  mode:
 *		  wake   the background worker delivers: the route is set
 *		         (outbox.route_notify, whose commit wakes the worker)
 *		  drain  outbox.drain_once(topic) in a loop until it returns 0
 *		         (the route must exist and no worker may serve the topic)
 *		The time runs from just before the route is set (or the first
 *		drain_once) to the arrival of the last notification.  Prints
 *		  "notify <mode> messages=N seconds=S rate=R"
 *
 *	driver listen conninfo channel seconds
 *		LISTENs and reads notifications for `seconds`, printing "ready
 *		pid=<its pid>" once listening and "received=N" at the end (a consumer that keeps
 *		the notification queue empty during the steady-state workloads).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define BENCH_PROGNAME "driver"
#include "bench_common.h"

#define MAX_WORKERS		64
#define MAX_SUBSCRIPTIONS	16	/* of one pull run */
#define IDLE_TIMEOUT_MS	10000
#define POLL_IDLE_MS	10		/* W8: a worker that got nothing waits this long */
#define SAMPLE_SECONDS	5		/* W8: one csv line every so many seconds */

/* The phases of W8 */
enum
{
	PHASE_CLEAN,
	PHASE_HELD,
	PHASE_RECOVERY,
	NUM_PHASES
};
static const char *const phase_names[NUM_PHASES] = {"clean", "held", "recovery"};

/* A growing list of claim latencies in milliseconds */
typedef struct Latencies
{
	double	   *ms;
	long		n;
	long		cap;
} Latencies;

/* What the workers of W8 share with the thread that samples */
typedef struct Shared
{
	pthread_mutex_t lock;
	volatile int stop;			/* set once the run is over */
	int			phase;
	long		consumed;
	Latencies	interval;		/* claims since the last sample */
	Latencies	phases[NUM_PHASES];
} Shared;

/* One pull worker */
typedef struct Worker
{
	int			no;
	const char *system;
	const char *conninfo;
	const char *topic;
	int			workers;
	int			batch;
	long		total;
	const char *subscription;	/* a named subscription; NULL: the default */
	long		done;			/* messages completed */
	double		end;			/* when it stopped (now_ms) */
	Shared	   *shared;			/* W8: consume until told to stop; else NULL */
	PGconn	   *other;			/* krizaka2p: the completions' connection */
	char		error[512];
} Worker;

static pthread_barrier_t start_barrier;

/* Connect, or die. */
static PGconn *
connect_or_die(const char *conninfo)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
		die(conn, "connecting");
	return conn;
}

/* Run a statement without parameters that must succeed. */
static void
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
		PQresultStatus(res) != PGRES_TUPLES_OK)
		die(conn, sql);
	PQclear(res);
}

/* Prepare a named statement, or die. */
static void
prepare_or_die(PGconn *conn, const char *name, const char *sql, int nparams)
{
	PGresult   *res = PQprepare(conn, name, sql, nparams, NULL);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(conn, sql);
	PQclear(res);
}

/*
 * Run a prepared statement; returns its result, or NULL with the error in
 * w->error.
 */
static PGresult *
run_prepared(PGconn *conn, Worker *w, const char *name, int n,
			 const char *const *params)
{
	PGresult   *res = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
		PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		snprintf(w->error, sizeof(w->error), "%s: %s", name,
				 PQerrorMessage(conn));
		PQclear(res);
		return NULL;
	}
	return res;
}

/* The uuid of floor key n: time-ordered like a UUIDv7, from a sequence. */
static void
floor_key(long n, char *buf, size_t len)
{
	snprintf(buf, len, "00000000-0000-7000-8000-%012lx", n);
}

/* floor: bare UPDATEs of `batch` rows by key range. */
static void
pull_floor(PGconn *conn, Worker *w)
{
	long		batches = w->total / w->batch;
	long		b;

	prepare_or_die(conn, "done",
				   "UPDATE floor.message SET delivered_at = now() "
				   "WHERE id >= $1::uuid AND id < $2::uuid", 2);
	pthread_barrier_wait(&start_barrier);
	for (b = w->no; b < batches; b += w->workers)
	{
		char		lo[40];
		char		hi[40];
		const char *params[2] = {lo, hi};
		PGresult   *res;

		floor_key(b * w->batch, lo, sizeof(lo));
		floor_key((b + 1) * w->batch, hi, sizeof(hi));
		if ((res = run_prepared(conn, w, "done", 2, params)) == NULL)
			return;
		w->done += atol(PQcmdTuples(res));
		PQclear(res);
	}
}

/* Append a latency to a list; the caller holds the lock of Shared. */
static void
latencies_add(Latencies *l, double ms)
{
	if (l->n == l->cap)
	{
		l->cap = l->cap ? l->cap * 2 : 1024;
		l->ms = realloc(l->ms, (size_t) l->cap * sizeof(double));
		if (l->ms == NULL)
		{
			fprintf(stderr, "driver: out of memory\n");
			exit(1);
		}
	}
	l->ms[l->n++] = ms;
}

/*
 * The q-quantile (nearest rank) of a list, which it sorts; -1 when the list
 * is empty.
 */
static double
latencies_quantile(Latencies *l, double q)
{
	long		rank;

	if (l->n == 0)
		return -1;
	qsort(l->ms, l->n, sizeof(double), cmp_double);
	rank = (long) (q * l->n);
	if (rank < q * l->n)
		rank++;
	return l->ms[rank > 0 ? rank - 1 : 0];
}

/* Has the run of W8 ended?  (Never in a pull run.) */
static int
stopped(Worker *w)
{
	return w->shared != NULL && __atomic_load_n(&w->shared->stop, __ATOMIC_SEQ_CST);
}

/*
 * A worker got nothing: a pull run is over for it, a W8 worker polls again
 * after POLL_IDLE_MS.  Returns whether the worker stops.
 */
static int
nothing_left(Worker *w)
{
	if (w->shared == NULL || stopped(w))
		return 1;
	usleep(POLL_IDLE_MS * 1000);
	return 0;
}

/* W8: record the latency of a claim that started at `start` (now_ms). */
static void
note_claim(Worker *w, double start)
{
	double		ms = now_ms() - start;

	if (w->shared == NULL)
		return;
	pthread_mutex_lock(&w->shared->lock);
	latencies_add(&w->shared->interval, ms);
	latencies_add(&w->shared->phases[w->shared->phase], ms);
	pthread_mutex_unlock(&w->shared->lock);
}

/* Count n messages consumed. */
static void
note_done(Worker *w, long n)
{
	w->done += n;
	if (w->shared == NULL)
		return;
	pthread_mutex_lock(&w->shared->lock);
	w->shared->consumed += n;
	pthread_mutex_unlock(&w->shared->lock);
}

/* The ids of a claimed batch (column 0) as a uuid[] literal, into buf. */
static void
ids_literal(PGresult *res, char *buf)
{
	char	   *p = buf;
	int			i;

	*p++ = '{';
	for (i = 0; i < PQntuples(res); i++)
		p += sprintf(p, "%s%s", i ? "," : "", PQgetvalue(res, i, 0));
	*p++ = '}';
	*p = '\0';
}

/* How a claim loop learns how many messages its "complete" completed */
typedef enum Completion
{
	COMPLETE_ROW_COUNT,			/* the complete statement's row count */
	COMPLETE_RESULT,			/* its result */
	COMPLETE_IN_CLAIM			/* no complete statement: the next claim
								 * completes the batch (complete_and_claim) */
} Completion;

/*
 * A claim-and-complete loop: the claim statement (prepared as "claim",
 * parameters owner, topic, batch size, and with COMPLETE_IN_CLAIM the ids
 * of the batch before), then the "complete" statement with the ids of the
 * batch and the owner.  With COMPLETE_IN_CLAIM a batch counts as done when
 * the claim that completes it returns; a pull run checks at its end that
 * nothing is left undelivered.
 */
static void
claim_loop(PGconn *conn, Worker *w, const char *owner, Completion how)
{
	char		batch[16];
	char	   *ids = malloc((size_t) w->batch * 40 + 3);
	long		held = 0;		/* messages the previous claim leased */

	strcpy(ids, "{}");
	snprintf(batch, sizeof(batch), "%d", w->batch);
	pthread_barrier_wait(&start_barrier);
	while (!stopped(w))
	{
		/* a named subscription: the last parameter of both statements */
		const char *claim[5] = {owner, w->topic, batch,
			how == COMPLETE_IN_CLAIM ? ids : w->subscription, w->subscription};
		const char *complete[3] = {ids, owner, w->subscription};
		int			nclaim = (how == COMPLETE_IN_CLAIM ? 4 : 3) + (w->subscription != NULL);
		PGresult   *res;
		double		start = now_ms();

		if ((res = run_prepared(conn, w, "claim", nclaim, claim)) == NULL)
			break;
		note_claim(w, start);
		if (how == COMPLETE_IN_CLAIM)
		{
			note_done(w, held);
			held = PQntuples(res);
			strcpy(ids, "{}");
		}
		if (PQntuples(res) == 0)
		{
			PQclear(res);
			if (nothing_left(w))
				break;
			continue;
		}
		ids_literal(res, ids);
		PQclear(res);
		if (how == COMPLETE_IN_CLAIM)
			continue;

		if ((res = run_prepared(w->other ? w->other : conn, w, "complete",
								2 + (w->subscription != NULL), complete)) == NULL)
			break;
		note_done(w, atol(how == COMPLETE_RESULT ? PQgetvalue(res, 0, 0) : PQcmdTuples(res)));
		PQclear(res);
	}
	free(ids);
}

/*
 * plain: the claim of bench/plain.sql, then one UPDATE that completes the
 * whole batch.
 */
static void
pull_plain(PGconn *conn, Worker *w)
{
	char		owner[32];

	snprintf(owner, sizeof(owner), "plain-%d", w->no);
	prepare_or_die(conn, "claim",
				   "UPDATE plain.message SET attempts = attempts + 1,"
				   " leased_until = now() + interval '60 seconds', lease_owner = $1 "
				   "WHERE id IN (SELECT id FROM plain.message"
				   " WHERE topic = $2 AND delivered_at IS NULL"
				   " AND available_at <= now()"
				   " AND (leased_until IS NULL OR leased_until < now())"
				   " ORDER BY available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) "
				   "RETURNING id, topic, event_type, payload, created_at, attempts", 3);
	prepare_or_die(conn, "complete",
				   "UPDATE plain.message SET delivered_at = now(), leased_until = NULL "
				   "WHERE id = ANY ($1::uuid[]) AND lease_owner = $2"
				   " AND delivered_at IS NULL", 2);
	claim_loop(conn, w, owner, COMPLETE_ROW_COUNT);
}

/*
 * krizaka: outbox.complete_and_claim, which completes the batch before
 * and claims the next in one call; krizakaa: the same across all topics
 * (its topic NULL); krizaka2: outbox.claim, then outbox.complete_many of
 * the whole batch; krizaka2p: the same, the complete_many on a connection
 * of its own.  With a named subscription, the
 * same calls with its name as their subscription argument; without, the
 * statements name none (the topic's default subscription).
 */
static void
pull_krizaka(PGconn *conn, Worker *w)
{
	char		owner[256];
	int			named = w->subscription != NULL;

	if (named)
		snprintf(owner, sizeof(owner), "krizaka-%s-%d", w->subscription, w->no);
	else
		snprintf(owner, sizeof(owner), "krizaka-%d", w->no);
	if (strncmp(w->system, "krizaka2", 8) == 0)
	{
		if (strcmp(w->system, "krizaka2p") == 0)
			w->other = connect_or_die(w->conninfo);
		prepare_or_die(conn, "claim", named ?
					   "SELECT id, topic, event_type, payload, created_at, attempts "
					   "FROM outbox.claim($1, $2, $3, subscription => $4)" :
					   "SELECT id, topic, event_type, payload, created_at, attempts "
					   "FROM outbox.claim($1, $2, $3)", 3 + named);
		prepare_or_die(w->other ? w->other : conn, "complete", named ?
					   "SELECT outbox.complete_many($1::uuid[], $2, $3)" :
					   "SELECT outbox.complete_many($1::uuid[], $2)", 2 + named);
		claim_loop(conn, w, owner, COMPLETE_RESULT);
		if (w->other)
			PQfinish(w->other);
		return;
	}
	prepare_or_die(conn, "claim", named ?
				   "SELECT id, topic, event_type, payload, created_at, attempts "
				   "FROM outbox.complete_and_claim($4::uuid[], $1, $2, $3, subscription => $5)" :
				   "SELECT id, topic, event_type, payload, created_at, attempts "
				   "FROM outbox.complete_and_claim($4::uuid[], $1, $2, $3)", 4 + named);
	claim_loop(conn, w, owner, COMPLETE_IN_CLAIM);
}

/*
 * pgq: consumer "bench" of one queue: "<topic>_<k>" for worker k in a pull
 * run, `topic` itself in W8.
 */
static void
pull_pgq(PGconn *conn, Worker *w)
{
	char		queue[256];

	if (w->shared == NULL)
		snprintf(queue, sizeof(queue), "%s_%d", w->topic, w->no);
	else
		snprintf(queue, sizeof(queue), "%s", w->topic);
	prepare_or_die(conn, "next", "SELECT pgq.next_batch($1, 'bench')", 1);
	prepare_or_die(conn, "events",
				   "SELECT ev_id, ev_type, ev_data FROM pgq.get_batch_events($1)", 1);
	prepare_or_die(conn, "finish", "SELECT pgq.finish_batch($1)", 1);
	pthread_barrier_wait(&start_barrier);
	while (!stopped(w))
	{
		const char *next[1] = {queue};
		const char *batch[1];
		char		batch_id[32];
		PGresult   *res;
		long		n;
		double		start = now_ms();

		if ((res = run_prepared(conn, w, "next", 1, next)) == NULL)
			return;
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			note_claim(w, start);
			if (nothing_left(w))
				return;
			continue;
		}
		snprintf(batch_id, sizeof(batch_id), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		batch[0] = batch_id;

		if ((res = run_prepared(conn, w, "events", 1, batch)) == NULL)
			return;
		note_claim(w, start);
		n = PQntuples(res);
		PQclear(res);

		if ((res = run_prepared(conn, w, "finish", 1, batch)) == NULL)
			return;
		PQclear(res);
		note_done(w, n);
	}
}

/*
 * How many messages of topic are not delivered (in a named subscription:
 * not finished in it, dead ones included): a pull run of krizaka counts a
 * batch as done when the call that completes it returns, and checks here
 * that every completion took.
 */
static long
undelivered(const char *conninfo, const char *topic, const char *subscription)
{
	PGconn	   *conn = connect_or_die(conninfo);
	const char *params[2] = {topic, subscription};
	PGresult   *res;
	long		n;

	if (subscription != NULL)
		res = PQexecParams(conn, "SELECT COALESCE(sum(pending + dead), 0)"
						   " FROM outbox.subscription_stats"
						   " WHERE topic = $1 AND subscription = $2",
						   2, NULL, params, NULL, NULL, 0);
	else
		res = PQexecParams(conn, "SELECT count(*) FROM outbox.message"
						   " WHERE topic = $1 AND delivered_at IS NULL",
						   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die(conn, "counting undelivered messages");
	n = atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(conn);
	return n;
}

/* A pull worker thread: connect, prepare, wait for the others, consume. */
static void *
pull_worker(void *arg)
{
	Worker	   *w = (Worker *) arg;
	PGconn	   *conn = connect_or_die(w->conninfo);

	if (strcmp(w->system, "floor") == 0)
		pull_floor(conn, w);
	else if (strcmp(w->system, "plain") == 0)
		pull_plain(conn, w);
	else if (strncmp(w->system, "krizaka", 7) == 0)
		pull_krizaka(conn, w);
	else
		pull_pgq(conn, w);
	w->end = now_ms();
	PQfinish(conn);
	return NULL;
}

/*
 * Start `workers` threads running fn on w[0..workers-1] (system, conninfo
 * and topic from argv[2..4]), or with nsubs > 0 `workers` threads for each
 * of the subscriptions subs[0..nsubs-1], in that order; they wait at
 * start_barrier, which the caller passes too.  Exits if a thread cannot
 * start.
 */
static void
start_workers(Worker *w, pthread_t *th, int workers, char **argv, int batch,
			  long total, Shared *shared, void *(*fn) (void *),
			  char **subs, int nsubs)
{
	int			threads = workers * (nsubs > 0 ? nsubs : 1);
	int			i;

	pthread_barrier_init(&start_barrier, NULL, threads + 1);
	for (i = 0; i < threads; i++)
	{
		memset(&w[i], 0, sizeof(Worker));
		w[i].no = i % workers;
		w[i].system = argv[2];
		w[i].conninfo = argv[3];
		/* krizakaa claims across all topics: the topic is only checked */
		w[i].topic = strcmp(argv[2], "krizakaa") == 0 ? NULL : argv[4];
		w[i].workers = workers;
		w[i].batch = batch;
		w[i].total = total;
		w[i].subscription = nsubs > 0 ? subs[i / workers] : NULL;
		w[i].shared = shared;
		if (pthread_create(&th[i], NULL, fn, &w[i]) != 0)
		{
			fprintf(stderr, "driver: cannot start a thread\n");
			exit(1);
		}
	}
}

/* Print the errors the workers met; returns whether there was one. */
static int
report_errors(Worker *w, int workers)
{
	int			failed = 0;
	int			i;

	for (i = 0; i < workers; i++)
	{
		if (w[i].error[0])
		{
			fprintf(stderr, "driver: worker %d: %s", i, w[i].error);
			failed = 1;
		}
	}
	return failed;
}

/* driver pull SYSTEM conninfo topic workers batch total [subscriptions] */
static int
cmd_pull(int argc, char **argv)
{
	Worker		w[MAX_WORKERS];
	pthread_t	th[MAX_WORKERS];
	char	   *subs[MAX_SUBSCRIPTIONS];
	char	   *list = NULL;
	const char *system;
	int			workers;
	int			batch;
	int			nsubs = 0;
	int			threads;
	long		total;
	long		done = 0;
	double		start;
	double		seconds;
	int			failed = 0;
	int			i;
	int			k;

	if (argc != 8 && argc != 9)
	{
		fprintf(stderr, "usage: driver pull floor|plain|krizaka|krizakaa|krizaka2|krizaka2p|pgq conninfo topic workers batch total [subscriptions]\n");
		return 2;
	}
	system = argv[2];
	workers = atoi(argv[5]);
	batch = atoi(argv[6]);
	total = atol(argv[7]);
	if (strcmp(system, "floor") != 0 && strcmp(system, "plain") != 0 &&
		strcmp(system, "krizaka") != 0 && strcmp(system, "krizakaa") != 0 &&
		strcmp(system, "krizaka2") != 0 && strcmp(system, "krizaka2p") != 0 &&
		strcmp(system, "pgq") != 0)
	{
		fprintf(stderr, "driver: unknown system \"%s\"\n", system);
		return 2;
	}
	if (argc == 9)
	{
		char	   *save = NULL;
		char	   *name;

		if (strncmp(system, "krizaka", 7) != 0)
		{
			fprintf(stderr, "driver: only krizaka, krizaka2 and krizaka2p read a named subscription\n");
			return 2;
		}
		list = strdup(argv[8]);
		for (name = strtok_r(list, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save))
		{
			if (nsubs == MAX_SUBSCRIPTIONS)
			{
				fprintf(stderr, "driver: at most %d subscriptions\n", MAX_SUBSCRIPTIONS);
				return 2;
			}
			subs[nsubs++] = name;
		}
		if (nsubs == 0)
		{
			fprintf(stderr, "driver: no subscription in \"%s\"\n", argv[8]);
			return 2;
		}
	}
	threads = workers * (nsubs > 0 ? nsubs : 1);
	if (workers < 1 || threads > MAX_WORKERS || batch < 1 || total < 1)
	{
		fprintf(stderr, "driver: workers 1-%d in all, batch and total positive\n", MAX_WORKERS);
		return 2;
	}

	/* the workers and this thread start the clock together */
	start_workers(w, th, workers, argv, batch, total, NULL, pull_worker, subs, nsubs);
	pthread_barrier_wait(&start_barrier);
	start = now_ms();
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	seconds = (now_ms() - start) / 1000.0;
	failed = report_errors(w, threads);

	if (nsubs == 0)
	{
		for (i = 0; i < workers; i++)
			done += w[i].done;
		printf("pull %s messages=%ld seconds=%.3f rate=%.0f\n",
			   system, done, seconds, done / seconds);
		if (done != total)
		{
			fprintf(stderr, "driver: %ld messages completed, %ld expected\n", done, total);
			failed = 1;
		}
		if (strncmp(system, "krizaka", 7) == 0 && strncmp(system, "krizaka2", 8) != 0 &&
			undelivered(argv[3], argv[4], NULL) != 0)
		{
			fprintf(stderr, "driver: messages of topic %s left undelivered\n", argv[4]);
			failed = 1;
		}
		free(list);
		return failed;
	}

	/* each subscription: until its last worker stopped */
	for (k = 0; k < nsubs; k++)
	{
		long		n = 0;
		double		end = start;

		for (i = k * workers; i < (k + 1) * workers; i++)
		{
			n += w[i].done;
			if (w[i].end > end)
				end = w[i].end;
		}
		done += n;
		printf("pull %s subscription=%s messages=%ld seconds=%.3f rate=%.0f\n",
			   system, subs[k], n, (end - start) / 1000.0, n / ((end - start) / 1000.0));
		if (n != total)
		{
			fprintf(stderr, "driver: %ld messages completed in subscription %s, %ld expected\n",
					n, subs[k], total);
			failed = 1;
		}
		if (strcmp(system, "krizaka") == 0 && undelivered(argv[3], argv[4], subs[k]) != 0)
		{
			fprintf(stderr, "driver: messages of topic %s left unfinished in subscription %s\n",
					argv[4], subs[k]);
			failed = 1;
		}
	}
	if (nsubs > 1)
		printf("pull %s subscriptions=%d messages=%ld seconds=%.3f rate=%.0f\n",
			   system, nsubs, done, seconds, done / seconds);
	free(list);
	return failed;
}

/* Count the notifications that arrived; sets *last to the time of the last. */
static long
count_notifications(PGconn *listener, double *last)
{
	PGnotify   *n;
	long		got = 0;

	if (!PQconsumeInput(listener))
		die(listener, "reading notifications");
	while ((n = PQnotifies(listener)) != NULL)
	{
		got++;
		PQfreemem(n);
	}
	if (got > 0)
		*last = now_ms();
	return got;
}

/* Wait up to ms for the listener's socket to become readable. */
static void
wait_readable(PGconn *listener, int ms)
{
	struct pollfd pfd = {PQsocket(listener), POLLIN, 0};

	(void) poll(&pfd, 1, ms);
}

/* The listening side of "driver notify", read by a thread of its own */
typedef struct Listener
{
	PGconn	   *conn;
	long		total;
	long		received;
	double		last;			/* arrival of the last notification */
} Listener;

/*
 * Read notifications as they come until all arrived, or none came for
 * IDLE_TIMEOUT_MS.
 */
static void *
listen_thread(void *arg)
{
	Listener   *l = (Listener *) arg;
	double		idle_since = now_ms();

	while (l->received < l->total && now_ms() - idle_since < IDLE_TIMEOUT_MS)
	{
		long		got;

		wait_readable(l->conn, 100);
		got = count_notifications(l->conn, &l->last);
		if (got > 0)
			idle_since = now_ms();
		l->received += got;
	}
	return NULL;
}

/* driver notify conninfo topic channel total wake|drain */
static int
cmd_notify(int argc, char **argv)
{
	Listener	l;
	pthread_t	th;
	PGconn	   *control;
	const char *topic;
	const char *channel;
	const char *mode;
	double		start;
	char		sql[512];

	if (argc != 7)
	{
		fprintf(stderr, "usage: driver notify conninfo topic channel total wake|drain\n");
		return 2;
	}
	topic = argv[3];
	channel = argv[4];
	mode = argv[6];
	if (strcmp(mode, "wake") != 0 && strcmp(mode, "drain") != 0)
	{
		fprintf(stderr, "driver: unknown mode \"%s\"\n", mode);
		return 2;
	}

	memset(&l, 0, sizeof(l));
	l.conn = connect_or_die(argv[2]);
	l.total = atol(argv[5]);
	control = connect_or_die(argv[2]);
	snprintf(sql, sizeof(sql), "LISTEN %s", channel);
	exec_ok(l.conn, sql);
	if (strcmp(mode, "drain") == 0)
		prepare_or_die(control, "drain", "SELECT outbox.drain_once($1)", 1);

	start = now_ms();
	l.last = start;
	if (pthread_create(&th, NULL, listen_thread, &l) != 0)
	{
		fprintf(stderr, "driver: cannot start a thread\n");
		return 1;
	}
	if (strcmp(mode, "wake") == 0)
	{
		const char *params[2] = {topic, channel};
		PGresult   *res = PQexecParams(control,
									   "SELECT outbox.route_notify($1, $2)",
									   2, NULL, params, NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die(control, "route_notify");
		PQclear(res);
	}
	else
	{
		const char *params[1] = {topic};

		for (;;)
		{
			PGresult   *res = PQexecPrepared(control, "drain", 1, params,
											 NULL, NULL, 0);
			int			n;

			if (PQresultStatus(res) != PGRES_TUPLES_OK)
				die(control, "drain_once");
			n = atoi(PQgetvalue(res, 0, 0));
			PQclear(res);
			if (n == 0)
				break;
		}
	}
	pthread_join(th, NULL);

	printf("notify %s messages=%ld seconds=%.3f rate=%.0f\n", mode, l.received,
		   (l.last - start) / 1000.0, l.received / ((l.last - start) / 1000.0));
	PQfinish(l.conn);
	PQfinish(control);
	if (l.received != l.total)
	{
		fprintf(stderr, "driver: %ld notifications received, %ld expected\n",
				l.received, l.total);
		return 1;
	}
	return 0;
}

/* driver listen conninfo channel seconds */
static int
cmd_listen(int argc, char **argv)
{
	PGconn	   *listener;
	double		end;
	double		last;
	long		received = 0;
	char		sql[512];

	if (argc != 5)
	{
		fprintf(stderr, "usage: driver listen conninfo channel seconds\n");
		return 2;
	}
	listener = connect_or_die(argv[2]);
	snprintf(sql, sizeof(sql), "LISTEN %s", argv[3]);
	exec_ok(listener, sql);
	printf("ready pid=%d\n", (int) getpid());
	fflush(stdout);

	end = now_ms() + atof(argv[4]) * 1000.0;
	while (now_ms() < end)
	{
		wait_readable(listener, 100);
		received += count_notifications(listener, &last);
	}
	printf("received=%ld\n", received);
	PQfinish(listener);
	return 0;
}

/*
 * W8, krizaka-worker: the one listener of the route's channel, counting
 * what the background worker delivers.
 */
static void *
listen_worker(void *arg)
{
	Worker	   *w = (Worker *) arg;
	PGconn	   *conn = connect_or_die(w->conninfo);
	char		sql[512];
	double		last;

	snprintf(sql, sizeof(sql), "LISTEN %s", w->topic);
	exec_ok(conn, sql);
	pthread_barrier_wait(&start_barrier);
	while (!stopped(w))
	{
		wait_readable(conn, 100);
		note_done(w, count_notifications(conn, &last));
	}
	PQfinish(conn);
	return NULL;
}

/* W8, krizakas: the named subscription its workers read */
static char *w8_subscription[] = {"w8"};

/* One reading of W8's counters, at t seconds into the run */
typedef struct Reading
{
	double		t;
	long		produced;
	long		consumed;
	long long	size;			/* bytes of the queue's tables */
} Reading;

/* Take a reading: produced and size from the server, consumed from here. */
static void
take_reading(PGconn *mon, Shared *sh, double start, Reading *r)
{
	PGresult   *res = PQexecPrepared(mon, "reading", 0, NULL, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die(mon, "reading the counters");
	r->t = (now_ms() - start) / 1000.0;
	r->produced = atol(PQgetvalue(res, 0, 0));
	r->size = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	pthread_mutex_lock(&sh->lock);
	r->consumed = sh->consumed;
	pthread_mutex_unlock(&sh->lock);
}

/* A latency in ms for the output: "nan" when there was none. */
static const char *
fmt_ms(double v, char *buf, size_t len)
{
	if (v < 0)
		snprintf(buf, len, "nan");
	else
		snprintf(buf, len, "%.2f", v);
	return buf;
}

/* Sleep until the monotonic clock reads t_ms. */
static void
sleep_until(double t_ms)
{
	double		d;

	while ((d = t_ms - now_ms()) > 0)
		usleep(d > 100 ? 100000 : (useconds_t) (d * 1000));
}

/*
 * driver w8 SYSTEM conninfo topic workers batch clean hold recovery csv [nohold]
 *
 * With nohold, the "held" phase holds no snapshot: the same run as a control,
 * which shows what the minutes of the hold cost without it (the table grows
 * all the same, as no run purges).
 */
static int
cmd_w8(int argc, char **argv)
{
	Worker		w[MAX_WORKERS];
	pthread_t	th[MAX_WORKERS];
	Shared		sh;
	Reading		at[NUM_PHASES + 1];	/* at the start of each phase, at the end */
	Reading		prev;
	Reading		cur;
	const char *system;
	const char *seq;
	const char *schema;
	int			workers;
	int			batch;
	int			seconds[NUM_PHASES];
	int			total;
	int			listener;
	int			failed = 0;
	double		start;
	char		sql[1024];
	char		b1[32];
	char		b2[32];
	FILE	   *csv;
	PGconn	   *mon;
	PGconn	   *hold;
	int			nohold;
	int			i;
	int			k;

	if (argc != 11 && !(argc == 12 && strcmp(argv[11], "nohold") == 0))
	{
		fprintf(stderr, "usage: driver w8 krizaka|krizaka2|krizakaa|krizakas|krizaka-worker|plain|pgq conninfo topic workers batch clean hold recovery csv [nohold]\n");
		return 2;
	}
	nohold = argc == 12;
	system = argv[2];
	workers = atoi(argv[5]);
	batch = atoi(argv[6]);
	total = 0;
	for (i = 0; i < NUM_PHASES; i++)
	{
		seconds[i] = atoi(argv[7 + i]);
		if (seconds[i] < SAMPLE_SECONDS || seconds[i] % SAMPLE_SECONDS != 0)
		{
			fprintf(stderr, "driver: the %s phase must last a positive multiple of %d s\n",
					phase_names[i], SAMPLE_SECONDS);
			return 2;
		}
		total += seconds[i];
	}
	/* where each system counts what was produced, and where it keeps its queue */
	listener = strcmp(system, "krizaka-worker") == 0;
	if (strcmp(system, "krizaka") == 0 || strcmp(system, "krizaka2") == 0 ||
		strcmp(system, "krizakaa") == 0 || strcmp(system, "krizakas") == 0 || listener)
		seq = "krizaka.orders_id_seq", schema = "outbox";
	else if (strcmp(system, "plain") == 0)
		seq = "plain.orders_id_seq", schema = "plain";
	else if (strcmp(system, "pgq") == 0)
		seq = "pgqapp.orders_id_seq", schema = "pgq";
	else
	{
		fprintf(stderr, "driver: unknown system \"%s\"\n", system);
		return 2;
	}
	if (workers < 1 || workers > MAX_WORKERS || batch < 1 || (listener && workers != 1))
	{
		fprintf(stderr, "driver: workers 1-%d (krizaka-worker: one listener), batch positive\n",
				MAX_WORKERS);
		return 2;
	}
	if ((csv = fopen(argv[10], "w")) == NULL)
	{
		fprintf(stderr, "driver: cannot write \"%s\": %s\n", argv[10], strerror(errno));
		return 1;
	}
	fprintf(csv, "system,t_s,phase,offered_per_s,consumed_per_s,backlog,claims,"
			"claim_p50_ms,claim_p99_ms,size_bytes\n");

	mon = connect_or_die(argv[3]);
	hold = connect_or_die(argv[3]);
	/* the tables of the schema with their indexes and TOAST; not the business rows */
	snprintf(sql, sizeof(sql),
			 "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s),"
			 " (SELECT COALESCE(sum(pg_catalog.pg_total_relation_size(c.oid)), 0)"
			 "    FROM pg_catalog.pg_class c"
			 "   WHERE c.relnamespace = '%s'::regnamespace AND c.relkind = 'r'"
			 "     AND c.relname <> 'orders')", seq, schema);
	prepare_or_die(mon, "reading", sql, 0);

	memset(&sh, 0, sizeof(sh));
	pthread_mutex_init(&sh.lock, NULL);
	start_workers(w, th, workers, argv, batch, 0, &sh,
				  listener ? listen_worker : pull_worker, w8_subscription,
				  strcmp(system, "krizakas") == 0 ? 1 : 0);
	pthread_barrier_wait(&start_barrier);
	start = now_ms();
	take_reading(mon, &sh, start, &prev);
	at[0] = prev;

	for (k = 1; k * SAMPLE_SECONDS <= total; k++)
	{
		int			t = k * SAMPLE_SECONDS;
		int			phase;
		long		claims;
		double		p50;
		double		p99;
		double		dt;

		sleep_until(start + t * 1000.0);
		take_reading(mon, &sh, start, &cur);
		pthread_mutex_lock(&sh.lock);
		phase = sh.phase;
		claims = sh.interval.n;
		p50 = latencies_quantile(&sh.interval, 0.50);
		p99 = latencies_quantile(&sh.interval, 0.99);
		sh.interval.n = 0;
		pthread_mutex_unlock(&sh.lock);
		dt = cur.t - prev.t;
		fprintf(csv, "%s,%d,%s,%.0f,%.0f,%ld,%ld,%s,%s,%lld\n", system, t,
				phase_names[phase], (cur.produced - prev.produced) / dt,
				(cur.consumed - prev.consumed) / dt, cur.produced - cur.consumed,
				claims, fmt_ms(p50, b1, sizeof(b1)), fmt_ms(p99, b2, sizeof(b2)),
				cur.size);
		fflush(csv);
		prev = cur;

		if (t == seconds[PHASE_CLEAN])
		{
			/* a snapshot of another table, held: the xmin horizon stops here */
			at[PHASE_HELD] = cur;
			if (!nohold)
			{
				exec_ok(hold, "BEGIN ISOLATION LEVEL REPEATABLE READ");
				exec_ok(hold, "SELECT count(*) FROM public.bench_unrelated");
			}
			pthread_mutex_lock(&sh.lock);
			sh.phase = PHASE_HELD;
			pthread_mutex_unlock(&sh.lock);
		}
		else if (t == seconds[PHASE_CLEAN] + seconds[PHASE_HELD])
		{
			at[PHASE_RECOVERY] = cur;
			if (!nohold)
				exec_ok(hold, "COMMIT");
			pthread_mutex_lock(&sh.lock);
			sh.phase = PHASE_RECOVERY;
			pthread_mutex_unlock(&sh.lock);
		}
	}
	at[NUM_PHASES] = prev;
	__atomic_store_n(&sh.stop, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < workers; i++)
		pthread_join(th[i], NULL);
	fclose(csv);
	PQfinish(hold);
	PQfinish(mon);
	failed = report_errors(w, workers);

	/* per phase: offered and consumed per second, claim latency */
	printf("w8 system=%s", system);
	for (i = 0; i < NUM_PHASES; i++)
	{
		double		dt = at[i + 1].t - at[i].t;

		printf(" offered_%s=%.0f consumed_%s=%.0f p50_%s=%s p99_%s=%s",
			   phase_names[i], (at[i + 1].produced - at[i].produced) / dt,
			   phase_names[i], (at[i + 1].consumed - at[i].consumed) / dt,
			   phase_names[i], fmt_ms(latencies_quantile(&sh.phases[i], 0.50), b1, sizeof(b1)),
			   phase_names[i], fmt_ms(latencies_quantile(&sh.phases[i], 0.99), b2, sizeof(b2)));
	}
	{
		Reading    *h = &at[PHASE_HELD];
		Reading    *r = &at[PHASE_RECOVERY];
		long		produced = r->produced - h->produced;
		long		backlog = r->produced - r->consumed;

		printf(" held_ratio=%.3f backlog_release=%ld backlog_release_s=%.1f backlog_end=%ld"
			   " size_hold=%lld size_release=%lld size_growth=%lld\n",
			   produced > 0 ? (double) (r->consumed - h->consumed) / produced : 0,
			   backlog, produced > 0 ? backlog / (produced / (r->t - h->t)) : 0,
			   at[NUM_PHASES].produced - at[NUM_PHASES].consumed,
			   h->size, r->size, r->size - h->size);
	}
	return failed;
}

/* Dispatch to the subcommand. */
int
main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "pull") == 0)
		return cmd_pull(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "notify") == 0)
		return cmd_notify(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "listen") == 0)
		return cmd_listen(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "w8") == 0)
		return cmd_w8(argc, argv);
	fprintf(stderr, "usage: driver pull|notify|listen|w8 ...\n");
	return 2;
}
