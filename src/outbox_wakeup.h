/*-------------------------------------------------------------------------
 *
 * outbox_wakeup.h
 *		Waking the background workers at commit (outbox_wakeup.c).
 *
 * The append and route functions ask here for the drain worker of their
 * database to be woken when their transaction commits, so outbox.h
 * includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WAKEUP_H
#define OUTBOX_WAKEUP_H

extern void OutboxWakeupInit(void);
extern void WakeWorkerAtCommit(void);
extern void WakeWorkerForTopic(text *topic);
extern void RoutesChangedAtCommit(void);

#endif							/* OUTBOX_WAKEUP_H */
