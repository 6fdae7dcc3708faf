/*-------------------------------------------------------------------------
 *
 * outbox_error.h
 *		One error type for the errors the outbox raises and the errors it
 *		keeps as text (see outbox_error.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ERROR_H
#define OUTBOX_ERROR_H

/*
 * An error condition, built once and then either raised or formatted as the
 * text that delivery records in last_error.  The strings are palloc'd in the
 * memory context current when they are set; message is NULL until the
 * condition is set.
 */
typedef struct OutboxError
{
	int			sqlerrcode;		/* ERRCODE_*, as MAKE_SQLSTATE encodes it */
	char	   *message;		/* primary message */
	char	   *detail;			/* or NULL */
	char	   *hint;			/* or NULL */
	char	   *context;		/* or NULL */
} OutboxError;

/* Has a condition been set? */
#define OutboxErrorIsSet(err)	((err)->message != NULL)

extern void OutboxErrorClear(OutboxError *err);
extern void OutboxErrorSet(OutboxError *err, int sqlerrcode,
						   const char *fmt,...) pg_attribute_printf(3, 4);
extern void OutboxErrorDetail(OutboxError *err,
							  const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorHint(OutboxError *err,
							const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorContext(OutboxError *err,
							   const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorRaise(int elevel, const OutboxError *err);
extern char *OutboxErrorText(const OutboxError *err);

/* Raise the condition as an ERROR; does not return. */
#define OutboxErrorThrow(err) \
	do { \
		OutboxErrorRaise(ERROR, (err)); \
		pg_unreachable(); \
	} while (0)

#endif							/* OUTBOX_ERROR_H */
