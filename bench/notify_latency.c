/*-------------------------------------------------------------------------
 *
 * notify_latency.c
 *		Commit-to-receipt latency of a NOTIFY route, measured from outside.
 *
 * One connection appends messages, each in a transaction of its own, at a
 * fixed rate (or one after the other); a second connection LISTENs on the
 * route's channel.  For every message the time from the return of its
 * COMMIT to the arrival of its notification is recorded, and the
 * distribution is printed.  The background worker (or anything else that
 * drains the topic) must be running.
 *
 *	notify_latency "conninfo" topic channel count [rate_per_second]
 *
 * rate 0 (the default) sends the next message once the previous one has
 * been received.  Output: one line "n=… p50=… p90=… p99=… max=… (ms)".
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libpq-fe.h"

#define BENCH_PROGNAME "notify_latency"
#include "bench_common.h"

static void
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		die(conn, sql);
	PQclear(res);
}

/* Collect the notifications that arrived; returns how many were new. */
static int
drain_notifications(PGconn *listener, const double *sent, double *latency,
					int count, int *received)
{
	PGnotify   *n;
	int			got = 0;

	if (!PQconsumeInput(listener))
		die(listener, "reading notifications");
	while ((n = PQnotifies(listener)) != NULL)
	{
		const char *p = strstr(n->extra, "\"seq\": ");
		double		t = now_ms();

		if (p)
		{
			int			seq = atoi(p + 7);

			if (seq >= 0 && seq < count && latency[seq] < 0 && sent[seq] > 0)
			{
				latency[seq] = t - sent[seq];
				(*received)++;
				got++;
			}
		}
		PQfreemem(n);
	}
	return got;
}

int
main(int argc, char **argv)
{
	PGconn	   *producer;
	PGconn	   *listener;
	const char *topic;
	const char *channel;
	int			count;
	double		rate;
	double	   *sent;
	double	   *latency;
	double		start;
	double		deadline;
	int			received = 0;
	int			i;
	char		sql[512];

	if (argc < 5)
	{
		fprintf(stderr, "usage: notify_latency conninfo topic channel count [rate_per_second]\n");
		return 2;
	}
	topic = argv[2];
	channel = argv[3];
	count = atoi(argv[4]);
	rate = argc > 5 ? atof(argv[5]) : 0;
	if (count <= 0)
		return 2;

	producer = PQconnectdb(argv[1]);
	listener = PQconnectdb(argv[1]);
	if (PQstatus(producer) != CONNECTION_OK)
		die(producer, "connecting");
	if (PQstatus(listener) != CONNECTION_OK)
		die(listener, "connecting");
	snprintf(sql, sizeof(sql), "LISTEN %s", channel);
	exec_ok(listener, sql);

	sent = calloc(count, sizeof(double));
	latency = malloc(count * sizeof(double));
	for (i = 0; i < count; i++)
		latency[i] = -1;

	start = now_ms();
	for (i = 0; i < count; i++)
	{
		const char *params[2];
		char		payload[64];
		PGresult   *res;

		/* pace the sends; meanwhile collect what arrives */
		if (rate > 0)
		{
			double		due = start + i * 1000.0 / rate;

			while (now_ms() < due)
			{
				struct pollfd pfd = {PQsocket(listener), POLLIN, 0};
				int			wait = (int) (due - now_ms());

				if (poll(&pfd, 1, wait > 0 ? wait : 0) > 0)
					drain_notifications(listener, sent, latency, count, &received);
			}
		}

		snprintf(payload, sizeof(payload), "{\"seq\": %d}", i);
		params[0] = topic;
		params[1] = payload;
		exec_ok(producer, "BEGIN");
		res = PQexecParams(producer,
						   "SELECT outbox.append($1, 'evt.bench.latency.v1', $2::jsonb)",
						   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die(producer, "append");
		PQclear(res);
		exec_ok(producer, "COMMIT");
		sent[i] = now_ms();

		drain_notifications(listener, sent, latency, count, &received);
		if (rate <= 0)
		{
			deadline = now_ms() + 10000;
			while (latency[i] < 0 && now_ms() < deadline)
			{
				struct pollfd pfd = {PQsocket(listener), POLLIN, 0};

				if (poll(&pfd, 1, 100) > 0)
					drain_notifications(listener, sent, latency, count, &received);
			}
		}
	}

	/* wait for the stragglers, at most 10 s */
	deadline = now_ms() + 10000;
	while (received < count && now_ms() < deadline)
	{
		struct pollfd pfd = {PQsocket(listener), POLLIN, 0};

		if (poll(&pfd, 1, 100) > 0)
			drain_notifications(listener, sent, latency, count, &received);
	}

	if (received == 0)
	{
		fprintf(stderr, "notify_latency: no notification received\n");
		return 1;
	}
	{
		double	   *l = malloc(received * sizeof(double));
		int			n = 0;

		for (i = 0; i < count; i++)
			if (latency[i] >= 0)
				l[n++] = latency[i];
		qsort(l, n, sizeof(double), cmp_double);
		printf("n=%d lost=%d p50=%.2f p90=%.2f p99=%.2f max=%.2f (ms)\n",
			   n, count - n, l[n / 2], l[(int) (n * 0.9)],
			   l[(int) (n * 0.99) < n ? (int) (n * 0.99) : n - 1], l[n - 1]);
	}
	PQfinish(producer);
	PQfinish(listener);
	return received == count ? 0 : 1;
}
