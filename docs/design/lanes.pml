/*
 * lanes.pml: txbox's lane protocol (relay/lanes.go, internal/outboxsql/lanes.go,
 * sql/postgres_lanes.sql) for the spin model checker. See lanes-model.md.
 *
 * NR relays, each a keeper (the heartbeat: renew, release, acquire, fence)
 * and a worker (the round: lane locks, claim, publish check, publish,
 * marks), the database (leases with epochs, advisory lane locks, row
 * locks, the claim transaction's idle timeout), a writer committing the
 * rows, a broker and a clock. Relays stall (any step may wait any number
 * of ticks), die and rejoin under a new owner name, give lanes up and take
 * them over.
 *
 * Time is a global tick. Counters hold what the code compares: a lease's
 * time left by the database's clock, a relay's own validUntil, a batch's
 * age and the claim transaction's idle time; clocks run at one rate
 * (the relay's checks use Go's monotonic clock).
 *
 * Mutations: -DNOFENCE (a lane taken over is read at once), -DNOAGE
 * (mayPublish without the claim's age check), -DNOHEAD (a claim without
 * the head-of-key rule: a lane's owner reads its rows in id order, skipping
 * rows locked by others). -DNOA leaves the assertion of (a) out, to look
 * for violations of (b) alone. -DNOCALM leaves calm out (safety checks).
 */

/* Bounds (override with spin -D...). The rows: 0 (key 0), 1 (key 1),
 * 2 (key 0), 3 (key 2); keys 0 and 1 share lane 0, key 2 is in lane 1. */
#ifndef NR
#define NR 2        /* relays, 2 or 3 */
#endif
#ifndef NL
#define NL 1        /* lanes, 1 or 2 */
#endif
#ifndef NROWS
#define NROWS 3     /* rows, 3 or 4 (the fourth needs NL 2) */
#endif
#define NK 3        /* keys */
#ifndef LEASE
#define LEASE 1     /* LaneLease, ticks */
#endif
#define CL 2        /* ClaimLease: the claim transaction's idle timeout */
#define PT 1        /* PublishTimeout */
#define BATCH 2     /* the claim's limit */
#ifndef MAXDEATHS
#define MAXDEATHS 1 /* relay deaths per run */
#endif

/* fixed data: a row's key, a key's lane */
byte rowKey[NROWS];
byte keyLane[NK];
byte prevRow[NROWS];   /* the row of the same key before it, or NONE */
#define NONE 255

/* the outbox table */
bool committed[NROWS];
byte ncommitted;
bool marked[NROWS];    /* published_at set */
byte lockedBy[NROWS];  /* claim transaction holding the row's lock: relay + 1, or 0 */
byte nmarked;

/* the broker */
bool delivered[NROWS];

/* the lanes table */
byte owner[NL];        /* owner name: 0 nobody, else ownerId(r) of some run of relay r */
byte leaseLeft[NL];    /* ticks until expires_at; 0: expired */
byte retired;          /* lanes done with: every row marked, none in a batch (retire) */

/* relays */
byte gen[NR];          /* runs of the relay so far: the owner name changes with each */
byte deaths;
bool calm;             /* from here on relays stay alive, run fast and publish without errors */

/* keeper (laneKeeper) */
byte act[NR];          /* lanes, a bit each */
byte pend[NR];
byte validLeft[NR];    /* validUntil - now, by the relay's clock */

/* worker (Relay.round): its phase */
#define IDLE    0
#define CLAIMED 1      /* claimed, not yet checked */
#define OPEN    2      /* passed mayPublish: its publish is under way, within PublishTimeout */
#define SENT    3      /* the broker has the batch; the marks are not yet committed */
#define STALE   4      /* too old to publish (or its publish timed out): it releases the batch */
byte wph[NR];
bool txAlive[NR];      /* the claim transaction is not ended by the server */
byte age[NR];          /* now - batch.Started (relay), which is also the claim
                          transaction's idle time (server): no statement runs
                          between the claim and the marks */
byte shLock[NR];       /* lanes share-locked by the claim transaction */
byte batch[NR];        /* rows, a bit each */

#define ownerId(r)     (r + 1 + NR * gen[r])
#define bit(i)         (1 << (i))
#define has(set, i)    (((set) >> (i)) & 1)
#define rowLane(i)     keyLane[rowKey[i]]
#define freeLane(l)    (owner[l] == 0 || leaseLeft[l] == 0)
#define open(s)        (wph[s] == OPEN)
#if NR > 2
#define busy           (wph[0] != IDLE || wph[1] != IDLE || wph[2] != IDLE)
#else
#define busy           (wph[0] != IDLE || wph[1] != IDLE)
#endif
/* going: not every row is marked, or a batch is in flight. Once not, no
 * row is ever claimed or published again: every process stops. */
#define going          (nmarked < NROWS || busy)

/* scratch, not part of the state */
hidden byte anyLock, i, j, k, l, n, lanes, take;
hidden byte ok, mine;

/* endTx ends relay r's claim transaction (commit, rollback, or the
 * server ending it): its row and lane locks go. */
inline endTx(r) {
	j = 0;
	do
	:: j < NROWS -> if :: lockedBy[j] == r + 1 -> lockedBy[j] = 0 :: else fi; j++
	:: else -> break
	od;
	shLock[r] = 0
}

inline resetWorker(r) {
	batch[r] = 0; wph[r] = IDLE; age[r] = 0; txAlive[r] = false
}

/* drop: the lane leaves act and pend */
inline drop(r, l) { act[r] = act[r] & ~bit(l); pend[r] = pend[r] & ~bit(l) }

/* lanesOf: the lanes of rows set */
inline lanesOf(set, out) {
	out = 0; j = 0;
	do
	:: j < NROWS -> if :: has(set, j) -> out = out | bit(rowLane(j)) :: else fi; j++
	:: else -> break
	od
}

/* retire: a lane whose rows are all marked and in no batch is never read,
 * locked for a row or published again; what its lease does from then on
 * changes nothing else (each step treats each lane on its own), so the
 * model forgets it: nobody owns it, nobody takes it. A reduction of the
 * state space, not a step of the protocol. */
inline retire() {
	i = 0;
	do
	:: i < NL ->
		ok = !has(retired, i); j = 0;
		do
		:: j < NROWS -> if :: rowLane(j) == i && !marked[j] -> ok = false :: else fi; j++
		:: else -> break
		od;
		n = 0;
		do
		:: n < NR -> lanesOf(batch[n], k); if :: has(k, i) -> ok = false :: else fi; n++
		:: else -> break
		od;
		if
		:: ok ->
			retired = retired | bit(i); owner[i] = 0; leaseLeft[i] = 0;
			j = 0;
			do
			:: j < NR -> drop(j, i); shLock[j] = shLock[j] & ~bit(i); j++
			:: else -> break
			od
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0 /* a d_step may not end with a loop's break */
}

proctype keeper(byte r) {
end:	do
	/* a beat, one step: Join + Renew; validUntil = sent + lease; keep(active, owned),
	 * keep(pending, owned), owned-but-unknown lanes go to pending. */
	:: atomic { going ->
		printf("MSC: relay %d beats\n", r);
		validLeft[r] = LEASE;
		l = 0;
		do
		:: l < NL ->
			if
			:: owner[l] == ownerId(r) ->
				leaseLeft[l] = LEASE;
				if :: !has(act[r], l) -> pend[r] = pend[r] | bit(l) :: else fi
			:: else -> drop(r, l)
			fi;
			l++
		:: else -> break
		od;
		/* release the surplus: any of its lanes (the share is over-approximated) */
		l = 0;
		do
		:: l < NL ->
			if
			:: !calm && (has(act[r], l) || has(pend[r], l)) ->
				printf("MSC: relay %d releases lane %d\n", r, l);
				drop(r, l);
				if :: owner[l] == ownerId(r) -> owner[l] = 0; leaseLeft[l] = 0 :: else fi
			:: true
			fi;
			l++
		:: else -> break
		od;
		/* Acquire: free or expired lanes, each with a new epoch, to pending */
		l = 0;
		do
		:: l < NL ->
			take = 0;
			if
			:: freeLane(l) && !has(retired, l) -> if :: take = 1 :: !calm fi
			:: else
			fi;
			if
			:: take ->
				printf("MSC: relay %d acquires lane %d\n", r, l);
				owner[l] = ownerId(r); leaseLeft[l] = LEASE;
				j = 0;
				do /* epoch + 1: a lease kept with the old epoch reads nothing */
				:: j < NR -> drop(j, l); j++
				:: else -> break
				od;
				pend[r] = pend[r] | bit(l)
			:: else
			fi;
			l++
		:: else -> break
		od;
		/* Fence: a pending lane no claim transaction share-locks becomes active */
		anyLock = 0; j = 0;
		do
		:: j < NR -> anyLock = anyLock | shLock[j]; j++
		:: else -> break
		od;
#ifdef NOFENCE
		anyLock = 0;
#endif
		l = 0;
		do
		:: l < NL ->
			if
			:: has(pend[r], l) && !has(anyLock, l) ->
				printf("MSC: relay %d fences lane %d\n", r, l);
				act[r] = act[r] | bit(l); pend[r] = pend[r] & ~bit(l)
			:: else
			fi;
			l++
		:: else -> break
		od }
	od
}

proctype worker(byte r) {
end:	do
	/* One round trip (pgx: BEGIN, lane_lock_active or lane_lock,
	 * lane_claim): leases() (the active lanes while validUntil holds),
	 * Started, the shared advisory locks of those of them that have
	 * undelivered rows (any other may be locked too: lane_lock in a
	 * backlog), then lane_claim with a snapshot taken after them: rows of
	 * the lanes locked and still owned at the epochs known, each lane
	 * read in id order, the rows read locked SKIP LOCKED, and the pick: a
	 * row only behind every earlier pending row of its key in this batch
	 * (a key stops at its first row locked elsewhere); the limits (a
	 * lane's share, the batch) may end the batch anywhere. */
	:: atomic { going && wph[r] == IDLE ->
		lanes = 0;
		if
		:: validLeft[r] > 0 ->
			l = 0;
			do
			:: l < NL ->
				if
				:: has(act[r], l) ->
					ok = false; j = 0;
					do
					:: j < NROWS -> if :: rowLane(j) == l && committed[j] && !marked[j] -> ok = true :: else fi; j++
					:: else -> break
					od;
					if
					:: ok -> lanes = lanes | bit(l)
#ifndef NOCALM
					:: !ok && !calm -> lanes = lanes | bit(l)
#else
					:: !ok -> lanes = lanes | bit(l)
#endif
					:: !ok
					fi
				:: else
				fi;
				l++
			:: else -> break
			od
		:: else
		fi;
		n = 0; j = 0;
		do
		:: j < NROWS && n < BATCH ->
			l = rowLane(j);
			ok = committed[j] && !marked[j] && lockedBy[j] == 0 &&
			     has(lanes, l) && owner[l] == ownerId(r);
#ifndef NOHEAD
			k = 0;
			do /* every earlier pending row of the key is in the batch */
			:: k < j -> if :: rowKey[k] == rowKey[j] && !marked[k] && !has(batch[r], k) -> ok = false :: else fi; k++
			:: else -> break
			od;
#endif
			if
			:: ok -> batch[r] = batch[r] | bit(j); lockedBy[j] = r + 1; n++; j++
			:: ok && !calm && n > 0 -> break /* the end of the claim's read (a limit) */
			:: !ok -> j++
			fi
		:: else -> break
		od;
		if
		:: batch[r] == 0 -> skip /* nothing claimed: Release (the lane locks go) */
		:: else -> shLock[r] = lanes; age[r] = 0; txAlive[r] = true; wph[r] = CLAIMED;
			printf("MSC: relay %d claims rows %d (bits)\n", r, batch[r])
		fi }
	/* mayPublish: validUntil holds and the claim transaction outlives the
	 * publish (age + PublishTimeout < ClaimLease); else Release */
	:: atomic { wph[r] == CLAIMED ->
		if
#ifdef NOAGE
		:: validLeft[r] > 0 ->
#else
		:: validLeft[r] > 0 && age[r] + PT < CL ->
#endif
			/* (a): no other relay's publish of these lanes is under way */
			lanesOf(batch[r], lanes);
			n = 0;
			do
			:: n < NR ->
				if
				:: n != r && open(n) -> lanesOf(batch[n], k);
#ifndef NOA
					assert((k & lanes) == 0)
#endif
				:: else
				fi;
				n++
			:: else -> break
			od;
			printf("MSC: relay %d may publish rows %d (age %d)\n", r, batch[r], age[r]);
			wph[r] = OPEN
		:: else -> endTx(r); resetWorker(r); retire()
		fi }
	/* publish the batch, one step: in id order, each row after the last
	 * one's ack, within PublishTimeout (a tick first: the publish timed
	 * out, STALE). A publish that fails or whose ack is lost is not
	 * modelled apart: a timeout sends nothing, and a stall past ClaimLease
	 * after the publish loses the marks of rows the broker has. */
	:: d_step { wph[r] == OPEN ->
		j = 0;
		do
		:: j < NROWS ->
			if
			:: has(batch[r], j) ->
				/* (b): a row first reaches the broker after every earlier row of its key */
				if
				:: !delivered[j] ->
					k = 0;
					do
					:: k < j -> assert(rowKey[k] != rowKey[j] || delivered[k]); k++
					:: else -> break
					od
				:: else
				fi;
				printf("MSC: relay %d publishes row %d\n", r, j);
				delivered[j] = true
			:: else
			fi;
			j++
		:: else -> break
		od;
		wph[r] = SENT }
	/* settle: mark the published rows and commit; an ended transaction
	 * marks nothing */
	:: d_step { wph[r] == SENT ->
		if
		:: txAlive[r] ->
			j = 0;
			do
			:: j < NROWS ->
				if :: has(batch[r], j) && !marked[j] -> marked[j] = true; nmarked++; printf("MSC: relay %d marks row %d\n", r, j) :: else fi;
				j++
			:: else -> break
			od
		:: else
		fi;
		endTx(r); resetWorker(r); retire() }
	/* Release of a batch too old to publish */
	:: d_step { wph[r] == STALE -> endTx(r); resetWorker(r); retire() }
	od
}

/* the server ends a claim transaction idle for ClaimLease. A batch
 * published (SENT) then marks nothing: the worker is done with it. (With
 * the age check, a batch not yet published is STALE by then: its release
 * and the server's end of it are one.) */
#ifdef NOAGE
#define killable(r) ((wph[r] == SENT || wph[r] == CLAIMED) && txAlive[r] && age[r] >= CL)
#else
#define killable(r) (wph[r] == SENT && age[r] >= CL)
#endif
#define kill(r) d_step { killable(r) -> \
		printf("MSC: server ends relay %d's claim transaction\n", r); \
		endTx(r); \
		if :: wph[r] == SENT -> resetWorker(r); retire() :: else -> txAlive[r] = false fi }
proctype server() {
end:	do
	:: kill(0)
	:: kill(1)
#if NR > 2
	:: kill(2)
#endif
	od
}

/* time: the database's lease clock, the relays' clocks, idle timeouts.
 * Once calm, the relays take no time (their counters stand) and only
 * dead runs' leases run out. */
proctype clock() {
end:	do
	:: d_step { going ->
		printf("MSC: tick\n");
		l = 0;
		do
		:: l < NL ->
			mine = false; i = 0;
			do
			:: i < NR -> mine = mine || owner[l] == ownerId(i); i++
			:: else -> break
			od;
			if :: leaseLeft[l] > 0 && !(calm && mine) -> leaseLeft[l]-- :: else fi;
			l++
		:: else -> break
		od;
		i = 0;
		do
		:: i < NR && !calm ->
			if :: validLeft[i] > 0 -> validLeft[i]-- :: else fi;
			if
#ifdef NOAGE
			:: wph[i] == CLAIMED && txAlive[i] && age[i] < CL -> age[i]++
#else
			:: wph[i] == CLAIMED -> wph[i] = STALE /* age + PublishTimeout >= ClaimLease */
#endif
			:: wph[i] == OPEN -> wph[i] = STALE /* PublishTimeout: nothing sent */
			:: wph[i] == SENT && age[i] < CL -> age[i]++
			:: else
			fi;
			i++
		:: else -> break
		od }
	od
}

/* the writer: a key's rows commit in id order (the insert-time key lock) */
#define canCommit(i) (!committed[i] && (prevRow[i] == NONE || committed[prevRow[i]]))
#define commit(i)    d_step { canCommit(i) -> committed[i] = true; ncommitted++ }
proctype writer() {
	do
	:: commit(2)
#if NROWS > 3
	:: commit(3)
#endif
	:: ncommitted == NROWS -> break
	od
}

/* deaths: the connections close (the claim transaction rolls back; the
 * leases stay until they expire) and the relay rejoins at once under a new
 * owner name. A relay that has rejoined and takes no step yet is one that
 * is still down: the model does not keep the two apart. The relays are
 * alike (names are only compared), so with one death only relay 0 dies:
 * a run where relay 1 dies is one of those with the names swapped. */
#define die(r) d_step { !calm && deaths < MAXDEATHS && going -> \
		printf("MSC: relay %d dies and rejoins\n", r); \
		deaths++; gen[r]++; \
		endTx(r); resetWorker(r); \
		act[r] = 0; pend[r] = 0; validLeft[r] = 0; retire() }
proctype chaos() {
end:	do
	:: die(0)
#if MAXDEATHS > 1
	:: die(1)
#if NR > 2
	:: die(2)
#endif
#endif
#ifndef NOCALM
	:: atomic { !calm -> calm = true }
#endif
	od
}

init {
	byte r;
	atomic {
		rowKey[0] = 0; rowKey[1] = 1; rowKey[2] = 0;
		committed[0] = true; committed[1] = true; ncommitted = 2;
		prevRow[0] = NONE; prevRow[1] = NONE; prevRow[2] = 0;
#if NROWS > 3
		rowKey[3] = 2; prevRow[3] = NONE;
#endif
		keyLane[0] = 0; keyLane[1] = 0; keyLane[2] = NL - 1;
		r = 0;
		do
		:: r < NR -> run keeper(r); run worker(r); r++
		:: else -> break
		od;
		/* after the data above: retire reads it */
		run server(); run clock(); run writer(); run chaos()
	}
}

/* (c): every row is published (the writer commits them all) */
ltl published { <> (nmarked == NROWS) }
