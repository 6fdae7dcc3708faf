/*-------------------------------------------------------------------------
 *
 * outbox_launcher_int.h
 *		What the launcher's files share, and nothing else includes: its view
 *		of a database it serves.
 *
 *	outbox_launcher.c		the launcher's loop: starting, reaping and
 *							stopping the drain workers
 *	outbox_launcher_dbs.c	which databases it serves, and as which role
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_LAUNCHER_INT_H
#define OUTBOX_LAUNCHER_INT_H

#include "datatype/timestamp.h"
#include "postmaster/bgworker.h"
#include "utils/hsearch.h"
#include "utils/palloc.h"

/* The launcher's own view of a database it serves */
typedef struct LauncherDb
{
	Oid			dboid;			/* hash key */
	NameData	datname;
	bool		wanted;			/* found by the latest scan */
	int			slotno;			/* shared slot, or -1 */
	BackgroundWorkerHandle *handle; /* registered worker, or NULL */
	Oid			roleid;			/* role the worker was started as */
	bool		stopping;		/* the launcher asked it to stop */
	bool		no_extension;	/* its last worker found no extension */
	bool		probe_requested;	/* CREATE EXTENSION committed there */
	bool		showing_problem;	/* slot's last_error is a setting problem */
	TimestampTz start_after;	/* no (re)start before this */
} LauncherDb;

/* the databases served (outbox_launcher_dbs.c) */
extern bool LauncherScanDatabases(HTAB *dbs, MemoryContext keep_cxt,
								  Oid *roleid, char **role_problem);
extern void LauncherForgetLogged(void);

#endif							/* OUTBOX_LAUNCHER_INT_H */
