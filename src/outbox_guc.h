/*-------------------------------------------------------------------------
 *
 * outbox_guc.h
 *		The outbox.* settings (outbox_guc.c) and whether the library is
 *		preloaded.
 *
 * Every module reads some of these, so outbox.h includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_GUC_H
#define OUTBOX_GUC_H

/*
 * Whether the postmaster loaded the library (shared_preload_libraries):
 * only then do the worker settings take effect, and do the shared state,
 * the launcher and the wake-up callbacks exist.  Set by _PG_init.
 */
extern bool outbox_preloaded;

/* settings of every session */
extern int	outbox_batch_size;
extern int	outbox_lease_seconds;
extern int	outbox_max_attempts;
extern int	outbox_backoff_seconds;
extern int	outbox_backoff_max_seconds;
extern int	outbox_retention_days;
extern int	outbox_subscription_max_lag;
extern int	outbox_remote_timeout_ms;
extern int	outbox_remote_pause_after;
extern int	outbox_http_timeout_ms;
extern bool outbox_http_allow_private;
extern char *outbox_http_private_networks;

#define OUTBOX_BATCH_SIZE_MIN		1
#define OUTBOX_BATCH_SIZE_MAX		500
#define OUTBOX_LEASE_SECONDS_MIN	10
#define OUTBOX_LEASE_SECONDS_MAX	3600

/* settings of the background worker */
extern char *outbox_worker_databases;
extern char *outbox_worker_role;
extern int	outbox_worker_naptime_ms;

/* settings of the server, read when its shared memory is sized */
extern int	outbox_claim_positions;

#define OUTBOX_CLAIM_POSITIONS_DEFAULT	1024

extern void OutboxGucInit(void);

#endif							/* OUTBOX_GUC_H */
