/*-------------------------------------------------------------------------
 *
 * outbox_spi.h
 *		Saved statements and the way every statement of the store runs
 *		through SPI (outbox_spi.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SPI_H
#define OUTBOX_SPI_H

#include "postgres.h"

#include "executor/spi.h"
#include "utils/plancache.h"

#define SAVED_STATEMENT_MAX_ARGS	12

/*
 * Which scans the planner may use for a statement.  See outbox_spi.c for
 * why the queue's statements are planned without sequential scans.
 */
typedef enum SavedStatementScans
{
	OBX_SCANS_INDEX = 0,		/* no sequential scan, no bitmap scan */
	OBX_SCANS_INDEX_OR_BITMAP,	/* no sequential scan */
	OBX_SCANS_ANY				/* the planner's own choice: for a statement
								 * that reads no table (an INSERT of VALUES),
								 * or one whole small table anyway */
} SavedStatementScans;

/*
 * SUBPLAN_FENCE ends the subquery of a correlated EXISTS that stays a
 * subplan (under an OR, in a select list, in RETURNING).  Without it the
 * planner also makes a hashed form of the subplan, which reads the whole
 * relation at every run, and picks one of the two by cost alone: from
 * PostgreSQL 18 on regardless of enable_seqscan = off, so that on tables
 * whose statistics say they are empty the whole read wins, and stays in
 * the saved plan while the tables grow.  An EXISTS among the ANDs of a
 * WHERE needs none: it becomes a join, which the fence prevents where a
 * join is what must not be (the join to p of a key's promotion).  The
 * same fence ends a subquery in FROM that must be planned on its own, its
 * scan seeing its own conditions only: a look-up by id that, pulled up
 * into a join, a plan made on empty tables replaced by a read of another
 * index whole.
 */
#define SUBPLAN_FENCE	" OFFSET 0"

/*
 * A statement prepared on first use and kept for the life of the backend.
 * Declared static and initialised with its text, the exact SPI_OK_* code it
 * answers with, its parameters and (when not OBX_SCANS_INDEX) its scans;
 * plan is filled in by the first run.
 */
typedef struct SavedStatement
{
	const char *sql;
	int			expect;			/* SPI_OK_SELECT, SPI_OK_UPDATE, ... */
	int			nargs;
	Oid			argtypes[SAVED_STATEMENT_MAX_ARGS];
	SavedStatementScans scans;
	SPIPlanPtr	plan;			/* NULL until first used */
} SavedStatement;

/*
 * Every saved statement is declared with SAVED_STATEMENT(name) = {...} or
 * SAVED_STATEMENTS(name, n) = {...} (an array of n), which also lists it
 * in the section obx_saved_statements of the library: the regression
 * tests prepare and plan each one (obx_saved_statements(), in
 * outbox_spi_check.c).  Where the compiler cannot name a section, the
 * list is empty and that function says so.
 */
typedef struct SavedStatementEntry
{
	SavedStatement *stmts;
	int			count;
	const char *name;
} SavedStatementEntry;

#if defined(__ELF__) && defined(__GNUC__)
#define SAVED_STATEMENT_LISTED 1
#define SAVED_STATEMENT_ENTRY(name, first, n) \
	static const SavedStatementEntry name##_entry \
	__attribute__((section("obx_saved_statements"), used, aligned(8))) = \
	{first, n, __FILE__ ":" #name}
#else
#define SAVED_STATEMENT_LISTED 0
#define SAVED_STATEMENT_ENTRY(name, first, n) \
	extern int	name##_entry
#endif

#define SAVED_STATEMENT(name) \
	static SavedStatement name; \
	SAVED_STATEMENT_ENTRY(name, &name, 1); \
	static SavedStatement name
#define SAVED_STATEMENTS(name, n) \
	static SavedStatement name[n]; \
	SAVED_STATEMENT_ENTRY(name, name, n); \
	static SavedStatement name[n]

/* a statement prepared and planned as its runs are, for the checks */
extern CachedPlan *SpiCheckPlan(SavedStatement *stmt);

/* one statement in a connection of its own */
extern uint64 SpiRun(SavedStatement *stmt, Datum *args, const char *nulls);
extern bool SpiRunFirstRow(SavedStatement *stmt, Datum *args,
						   const char *nulls, Datum *row, bool *rownulls,
						   int ncols);

/* several statements in one connection */
extern void SpiConnect(void);
extern void SpiFinish(void);
extern uint64 SpiExecute(SavedStatement *stmt, Datum *args, const char *nulls,
						 bool read_only, long count);
extern bool SpiExecuteBool(SavedStatement *stmt, Datum *args);
extern uint64 SpiExecuteLatest(SavedStatement *stmt, Datum *args,
							   const char *nulls);
extern uint64 SpiExecuteCommitted(SavedStatement *stmt, Datum *args,
								  const char *nulls, long count);
extern Portal SpiOpenCursor(SavedStatement *stmt, Datum *args,
							const char *nulls);

#endif							/* OUTBOX_SPI_H */
