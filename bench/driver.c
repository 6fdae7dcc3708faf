/*-------------------------------------------------------------------------
 *
 * driver.c
 *		The consumers of the benchmark (bench/run), where pgbench cannot
 *		express the workload: pull workers that stop when nothing is left,
 *		per-message completes, and NOTIFY drains timed at the listener.
 *
 *	driver pull SYSTEM conninfo topic workers batch total
 *		SYSTEM is one of
 *		  floor    bare UPDATE of `batch` rows by key range per statement
 *		           (worker k takes batches k, k + workers, ...; `total` rows)
 *		  plain    the plain-SQL outbox of bench/plain.sql: one claim
 *		           statement, then one UPDATE per message, each committed
 *		  krizaka  outbox.claim, then outbox.complete_many of the batch
 *		  pgq      PgQ: worker k consumes queue "<topic>_<k>" as consumer
 *		           "bench": next_batch, get_batch_events, finish_batch
 *		Every statement runs in its own transaction (autocommit).  A worker
 *		stops when it gets nothing.  Prints one line:
 *		  "pull <system> messages=N seconds=S rate=R"
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
#define IDLE_TIMEOUT_MS	10000

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
	long		done;			/* messages completed */
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

/* plain: the claim of bench/plain.sql, then one UPDATE per message. */
static void
pull_plain(PGconn *conn, Worker *w)
{
	char		owner[32];
	char		batch[16];

	snprintf(owner, sizeof(owner), "plain-%d", w->no);
	snprintf(batch, sizeof(batch), "%d", w->batch);
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
				   "WHERE id = $1 AND lease_owner = $2", 2);
	pthread_barrier_wait(&start_barrier);
	for (;;)
	{
		const char *claim[3] = {owner, w->topic, batch};
		PGresult   *res;
		int			n;
		int			i;

		if ((res = run_prepared(conn, w, "claim", 3, claim)) == NULL)
			return;
		n = PQntuples(res);
		if (n == 0)
		{
			PQclear(res);
			return;
		}
		for (i = 0; i < n; i++)
		{
			const char *complete[2] = {PQgetvalue(res, i, 0), owner};
			PGresult   *done;

			if ((done = run_prepared(conn, w, "complete", 2, complete)) == NULL)
			{
				PQclear(res);
				return;
			}
			w->done += atol(PQcmdTuples(done));
			PQclear(done);
		}
		PQclear(res);
	}
}

/* krizaka: outbox.claim, then outbox.complete_many of the whole batch. */
static void
pull_krizaka(PGconn *conn, Worker *w)
{
	char		owner[32];
	char		batch[16];
	char	   *ids = malloc((size_t) w->batch * 40 + 3);

	snprintf(owner, sizeof(owner), "krizaka-%d", w->no);
	snprintf(batch, sizeof(batch), "%d", w->batch);
	prepare_or_die(conn, "claim",
				   "SELECT id, topic, event_type, payload, created_at, attempts "
				   "FROM outbox.claim($1, $2, $3)", 3);
	prepare_or_die(conn, "complete",
				   "SELECT outbox.complete_many($1::uuid[], $2)", 2);
	pthread_barrier_wait(&start_barrier);
	for (;;)
	{
		const char *claim[3] = {owner, w->topic, batch};
		const char *complete[2] = {ids, owner};
		PGresult   *res;
		char	   *p = ids;
		int			n;
		int			i;

		if ((res = run_prepared(conn, w, "claim", 3, claim)) == NULL)
			break;
		n = PQntuples(res);
		if (n == 0)
		{
			PQclear(res);
			break;
		}
		*p++ = '{';
		for (i = 0; i < n; i++)
			p += sprintf(p, "%s%s", i ? "," : "", PQgetvalue(res, i, 0));
		*p++ = '}';
		*p = '\0';
		PQclear(res);

		if ((res = run_prepared(conn, w, "complete", 2, complete)) == NULL)
			break;
		w->done += atol(PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	free(ids);
}

/* pgq: one queue per worker, consumed in its batches. */
static void
pull_pgq(PGconn *conn, Worker *w)
{
	char		queue[256];

	snprintf(queue, sizeof(queue), "%s_%d", w->topic, w->no);
	prepare_or_die(conn, "next", "SELECT pgq.next_batch($1, 'bench')", 1);
	prepare_or_die(conn, "events",
				   "SELECT ev_id, ev_type, ev_data FROM pgq.get_batch_events($1)", 1);
	prepare_or_die(conn, "finish", "SELECT pgq.finish_batch($1)", 1);
	pthread_barrier_wait(&start_barrier);
	for (;;)
	{
		const char *next[1] = {queue};
		const char *batch[1];
		char		batch_id[32];
		PGresult   *res;

		if ((res = run_prepared(conn, w, "next", 1, next)) == NULL)
			return;
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			return;
		}
		snprintf(batch_id, sizeof(batch_id), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		batch[0] = batch_id;

		if ((res = run_prepared(conn, w, "events", 1, batch)) == NULL)
			return;
		w->done += PQntuples(res);
		PQclear(res);

		if ((res = run_prepared(conn, w, "finish", 1, batch)) == NULL)
			return;
		PQclear(res);
	}
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
	else if (strcmp(w->system, "krizaka") == 0)
		pull_krizaka(conn, w);
	else
		pull_pgq(conn, w);
	PQfinish(conn);
	return NULL;
}

/* driver pull SYSTEM conninfo topic workers batch total */
static int
cmd_pull(int argc, char **argv)
{
	Worker		w[MAX_WORKERS];
	pthread_t	th[MAX_WORKERS];
	const char *system;
	int			workers;
	int			batch;
	long		total;
	long		done = 0;
	double		start;
	double		seconds;
	int			failed = 0;
	int			i;

	if (argc != 8)
	{
		fprintf(stderr, "usage: driver pull floor|plain|krizaka|pgq conninfo topic workers batch total\n");
		return 2;
	}
	system = argv[2];
	workers = atoi(argv[5]);
	batch = atoi(argv[6]);
	total = atol(argv[7]);
	if (strcmp(system, "floor") != 0 && strcmp(system, "plain") != 0 &&
		strcmp(system, "krizaka") != 0 && strcmp(system, "pgq") != 0)
	{
		fprintf(stderr, "driver: unknown system \"%s\"\n", system);
		return 2;
	}
	if (workers < 1 || workers > MAX_WORKERS || batch < 1 || total < 1)
	{
		fprintf(stderr, "driver: workers 1-%d, batch and total positive\n", MAX_WORKERS);
		return 2;
	}

	/* the workers and this thread start the clock together */
	pthread_barrier_init(&start_barrier, NULL, workers + 1);
	for (i = 0; i < workers; i++)
	{
		memset(&w[i], 0, sizeof(Worker));
		w[i].no = i;
		w[i].system = system;
		w[i].conninfo = argv[3];
		w[i].topic = argv[4];
		w[i].workers = workers;
		w[i].batch = batch;
		w[i].total = total;
		if (pthread_create(&th[i], NULL, pull_worker, &w[i]) != 0)
		{
			fprintf(stderr, "driver: cannot start a thread\n");
			return 1;
		}
	}
	pthread_barrier_wait(&start_barrier);
	start = now_ms();
	for (i = 0; i < workers; i++)
		pthread_join(th[i], NULL);
	seconds = (now_ms() - start) / 1000.0;

	for (i = 0; i < workers; i++)
	{
		done += w[i].done;
		if (w[i].error[0])
		{
			fprintf(stderr, "driver: worker %d: %s", i, w[i].error);
			failed = 1;
		}
	}
	printf("pull %s messages=%ld seconds=%.3f rate=%.0f\n",
		   system, done, seconds, done / seconds);
	if (done != total)
	{
		fprintf(stderr, "driver: %ld messages completed, %ld expected\n", done, total);
		failed = 1;
	}
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
	fprintf(stderr, "usage: driver pull|notify|listen ...\n");
	return 2;
}
