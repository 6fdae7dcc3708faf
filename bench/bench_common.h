/*
 * bench_common.h
 *		What the benchmark's two C drivers (driver.c, notify_latency.c)
 *		share: a monotonic clock, sorting doubles and dying on a libpq
 *		error.  Each driver
 *		defines BENCH_PROGNAME, the name its error messages start with,
 *		before including this file.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "libpq-fe.h"

/* The monotonic clock in milliseconds. */
static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* qsort's comparison of two doubles */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Print the connection's error and end the program. */
static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, BENCH_PROGNAME ": %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

#endif							/* BENCH_COMMON_H */
