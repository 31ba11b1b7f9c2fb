// nccl_emu_checks.h: the NCCL emulation's cross-rank checks (for
// tests/emu_include/nccl.h, which records; tests/nccl_emu_engine.h runs the
// watchdog). Each rank writes the NCCL operations it issues, their progress,
// its communicators and what its host thread waits for into memory the ranks
// of the job share (an MPI shared-memory window: the emulation runs on one
// machine), and world rank 0's watchdog reads all of it twice a second:
//
// - Deadlock. The emulated kernels wait as NCCL's do (a stream's kernels run
//   one after another; a receive, a send above NCCL_BUFFSIZE and a collective
//   complete only once their partners have started theirs), so kernels that
//   wait for each other in a cycle never complete. The watchdog builds the
//   graph of what each kernel under way waits for -- the kernel before it on
//   its stream; a partner's kernel not yet started; a partner's host thread
//   that has not issued the matching call while it waits for one of its own
//   kernels -- and a cycle that stays unchanged for a second and a half is
//   reported in one line naming every rank and operation in it, then the job
//   ends (abort). NCCL: "Point-to-point calls within a group will be blocking
//   until that group of calls completes ... It is therefore important to merge
//   calls that need to progress concurrently to avoid deadlocks"
//   (docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/p2p.html).
//
// - Order across communicators. NCCL's kernels may run one at a time on a GPU
//   ("NCCL kernels are blocking (waiting for data to arrive), and any CUDA
//   operation can cause a device synchronization"), so "operations on
//   different communicators should ... be used at different epochs ... and
//   applications should ensure operations are submitted in the same order
//   across ranks" (usage/communicators.html, "Using multiple NCCL
//   communicators concurrently"). The emulation runs each communicator's
//   stream on its own, so operations issued in different orders complete
//   here; the watchdog finds them among completed kernels: the graph of what
//   each kernel would wait for if every rank ran its kernels one at a time in
//   the order it issued them (a rank's kernel after its previous one; a
//   partner's kernel after the partner's previous one) has a cycle through
//   two or more communicators. Reported in one line naming the operations
//   each rank issued in its order. (Cycles within one communicator are hangs
//   here, reported as deadlocks.)
//
// The records of a rank are a ring of its last EMU_NCCL_LOG operations;
// an operation that left the ring is not checked.
#ifndef LLMC_NCCL_EMU_CHECKS_H
#define LLMC_NCCL_EMU_CHECKS_H

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <vector>

// The emulated calls (also without MPI, where only one-rank communicators exist and nothing below is built).
enum EmuNcclKind { EMU_ALL_REDUCE, EMU_REDUCE_SCATTER, EMU_ALL_GATHER, EMU_REDUCE, EMU_BROADCAST, EMU_SEND, EMU_RECV };
static const char *const emu_nccl_call_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclReduce",
                                                  "ncclBroadcast", "ncclSend", "ncclRecv"};
static inline bool emu_nccl_is_p2p(int kind) { return kind == EMU_SEND || kind == EMU_RECV; }

#ifdef LLMC_MPI

#define EMU_NCCL_LOG 2048        // operations a rank's ring keeps
#define EMU_NCCL_MAX_COMMS 16    // communicators a rank holds at once
#define EMU_NCCL_MAX_MEMBERS 16  // world ranks a communicator names (more still work, unnamed)

enum { EMU_NCCL_QUEUED, EMU_NCCL_STARTED, EMU_NCCL_DONE };

// One operation, written once by its rank's host thread (seq odd while written).
struct EmuNcclRecord {
    std::atomic<uint64_t> seq;   // 2 * (its number in the rank's log + 1) once written
    uint64_t kernel;             // the rank's kernel: one call, or a group's calls
    uint64_t comm;               // the communicator's id
    uint64_t index;              // a collective's number on comm, or a message's from src to dst on comm
    uint64_t bytes;
    int32_t kind, src, dst;      // src, dst: world ranks of a send or receive (-1: a collective)
    int32_t stream, calls;       // the rank's number for the stream; calls in the kernel
    int32_t rendezvous;          // a send that completes only once its receive has started
    std::atomic<int32_t> state;  // EMU_NCCL_QUEUED, _STARTED, _DONE (the engine thread's)
};

struct EmuNcclCommInfo {
    std::atomic<uint64_t> id;    // 0: a free entry
    std::atomic<int32_t> live;   // 0: destroyed (kept for the records that name it, until its entry is needed)
    int32_t number, size;        // the order in which this rank made it; its ranks
    int32_t world[EMU_NCCL_MAX_MEMBERS];
    std::atomic<uint64_t> colls;  // collectives issued on it
    std::atomic<uint64_t> sent[EMU_NCCL_MAX_MEMBERS], received[EMU_NCCL_MAX_MEMBERS];  // messages, by peer
};

struct EmuNcclRankSlot {
    std::atomic<uint64_t> version;         // bumped by every change below
    std::atomic<uint64_t> logged;          // records written
    std::atomic<int64_t> host_waits_for;   // the kernel the host thread waits for (-1: none)
    EmuNcclCommInfo comms[EMU_NCCL_MAX_COMMS];
    EmuNcclRecord log[EMU_NCCL_LOG];
};

struct EmuNcclShared {
    MPI_Comm node;
    MPI_Win win;
    int ranks, me;
    std::vector<EmuNcclRankSlot *> slots;
    size_t buffsize;  // NCCL_BUFFSIZE (named in the reports)
};

// Opens the window (every world rank, together: MPI_COMM_WORLD's collectives);
// NULL when the ranks are not all on one machine (the checks are off then).
static EmuNcclShared *emu_nccl_shared_open(size_t buffsize) {
    int world = 0, me = 0, mine = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        emu_fail("emulated NCCL: MPI_Comm_split_type failed");
    MPI_Comm_size(node, &mine);
    int all_here = mine == world, everywhere = 0;
    MPI_Allreduce(&all_here, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!everywhere) {
        MPI_Comm_free(&node);
        return NULL;
    }
    EmuNcclShared *sh = new EmuNcclShared;
    sh->node = node;
    sh->ranks = world;
    sh->me = me;
    sh->buffsize = buffsize;
    void *base = NULL;
    if (MPI_Win_allocate_shared((MPI_Aint)sizeof(EmuNcclRankSlot), 1, MPI_INFO_NULL, node, &base, &sh->win) !=
        MPI_SUCCESS)
        emu_fail("emulated NCCL: MPI_Win_allocate_shared failed");
    memset(base, 0, sizeof(EmuNcclRankSlot));
    EmuNcclRankSlot *slot = new (base) EmuNcclRankSlot;
    slot->host_waits_for = -1;
    MPI_Barrier(node);
    for (int r = 0; r < world; r++) {
        MPI_Aint bytes;
        int unit;
        void *p;
        MPI_Win_shared_query(sh->win, r, &bytes, &unit, &p);
        sh->slots.push_back((EmuNcclRankSlot *)p);
    }
    return sh;
}

static void emu_nccl_shared_close(EmuNcclShared *sh) {
    if (!sh) return;
    MPI_Barrier(sh->node);  // (no rank's watchdog reads the window any more)
    MPI_Win_free(&sh->win);
    MPI_Comm_free(&sh->node);
    delete sh;
}

static inline EmuNcclRankSlot *emu_nccl_my_slot(EmuNcclShared *sh) { return sh->slots[sh->me]; }
static inline void emu_nccl_changed(EmuNcclShared *sh) { emu_nccl_my_slot(sh)->version.fetch_add(1); }

// A communicator's entry in this rank's table: a free one, else a destroyed one's.
static EmuNcclCommInfo *emu_nccl_comm_info(EmuNcclShared *sh, uint64_t id, int number, const std::vector<int> &world) {
    EmuNcclRankSlot *s = emu_nccl_my_slot(sh);
    for (int pass = 0; pass < 2; pass++)
        for (EmuNcclCommInfo &c : s->comms) {
            if (pass == 0 ? c.id.load() != 0 : c.live.load()) continue;
            c.id.store(0);
            c.number = number;
            c.size = (int)world.size();
            for (size_t i = 0; i < world.size() && i < EMU_NCCL_MAX_MEMBERS; i++) c.world[i] = world[i];
            c.colls = 0;
            for (int i = 0; i < EMU_NCCL_MAX_MEMBERS; i++) c.sent[i] = c.received[i] = 0;
            c.live.store(1);
            c.id.store(id);
            emu_nccl_changed(sh);
            return &c;
        }
    emu_fail("emulated NCCL: more communicators at once than the checks' table holds (EMU_NCCL_MAX_COMMS)");
}
static void emu_nccl_comm_info_free(EmuNcclShared *sh, EmuNcclCommInfo *c) {
    c->live.store(0);
    emu_nccl_changed(sh);
}

// Writes one operation's record; returns its number in the log.
static uint64_t emu_nccl_log(EmuNcclShared *sh, uint64_t kernel, uint64_t comm, int kind, int src, int dst,
                             uint64_t index, uint64_t bytes, int stream, int calls, bool rendezvous) {
    EmuNcclRankSlot *s = emu_nccl_my_slot(sh);
    uint64_t n = s->logged.load();
    EmuNcclRecord &r = s->log[n % EMU_NCCL_LOG];
    r.seq.store(2 * n + 1);
    std::atomic_thread_fence(std::memory_order_release);
    r.kernel = kernel, r.comm = comm, r.kind = kind, r.src = src, r.dst = dst, r.index = index, r.bytes = bytes;
    r.stream = stream, r.calls = calls, r.rendezvous = rendezvous;
    r.state.store(EMU_NCCL_QUEUED);
    r.seq.store(2 * n + 2, std::memory_order_release);
    s->logged.store(n + 1);
    emu_nccl_changed(sh);
    return n;
}
// The engine's progress on a logged operation (nothing if it left the ring).
static void emu_nccl_log_state(EmuNcclShared *sh, uint64_t n, int state) {
    EmuNcclRecord &r = emu_nccl_my_slot(sh)->log[n % EMU_NCCL_LOG];
    if (r.seq.load() != 2 * n + 2) return;
    r.state.store(state);
    emu_nccl_changed(sh);
}
static void emu_nccl_host_waits(EmuNcclShared *sh, int64_t kernel) {
    EmuNcclRankSlot *s = emu_nccl_my_slot(sh);
    if (s->host_waits_for.exchange(kernel) != kernel) emu_nccl_changed(sh);
}

// ---------------------------------------------------------------------------
// the watchdog's view of every rank

struct EmuNcclOpView {
    int rank, kind, src, dst, stream, calls, rendezvous, state;
    uint64_t kernel, comm, index, bytes;
};
struct EmuNcclCommView {
    uint64_t id;
    int number, size;
    std::vector<int> world;
    uint64_t colls;
    std::vector<uint64_t> sent, received;  // by the peer's rank in the communicator
};
typedef std::pair<int, uint64_t> EmuNcclKernelId;  // (world rank, kernel)
struct EmuNcclKernelView {
    std::vector<int> ops;          // into EmuNcclSnapshot::ops
    std::set<int> streams;
    bool started = false, done = true;
};
struct EmuNcclSnapshot {
    std::vector<EmuNcclOpView> ops;
    std::vector<std::vector<EmuNcclCommView>> comms;  // per rank
    std::vector<int64_t> host_waits;
    std::vector<uint64_t> versions;
    std::map<EmuNcclKernelId, EmuNcclKernelView> kernels;
    std::map<std::vector<uint64_t>, int> by_key;      // an operation's identity on its rank -> ops index
};

// (comm, 0, rank, index) for a collective; (comm, 1 + is-receive, src, dst, index) for a message
static std::vector<uint64_t> emu_nccl_op_key(const EmuNcclOpView &o, int rank) {
    if (!emu_nccl_is_p2p(o.kind)) return {o.comm, 0, (uint64_t)rank, o.index};
    return {o.comm, 1 + (uint64_t)(o.kind == EMU_RECV), (uint64_t)o.src, (uint64_t)o.dst, o.index};
}

static EmuNcclSnapshot emu_nccl_snapshot(EmuNcclShared *sh) {
    EmuNcclSnapshot v;
    v.comms.resize(sh->ranks);
    for (int r = 0; r < sh->ranks; r++) {
        EmuNcclRankSlot *s = sh->slots[r];
        v.versions.push_back(s->version.load());
        v.host_waits.push_back(s->host_waits_for.load());
        for (EmuNcclCommInfo &c : s->comms) {
            EmuNcclCommView cv;
            cv.id = c.id.load();
            if (!cv.id) continue;
            cv.number = c.number, cv.size = c.size, cv.colls = c.colls.load();
            for (int i = 0; i < c.size && i < EMU_NCCL_MAX_MEMBERS; i++) {
                cv.world.push_back(c.world[i]);
                cv.sent.push_back(c.sent[i].load());
                cv.received.push_back(c.received[i].load());
            }
            v.comms[r].push_back(cv);
        }
        uint64_t logged = s->logged.load();
        for (uint64_t n = logged > EMU_NCCL_LOG ? logged - EMU_NCCL_LOG : 0; n < logged; n++) {
            EmuNcclRecord &rec = s->log[n % EMU_NCCL_LOG];
            uint64_t seq = rec.seq.load(std::memory_order_acquire);
            if (seq != 2 * n + 2) continue;
            EmuNcclOpView o;
            o.rank = r, o.kind = rec.kind, o.src = rec.src, o.dst = rec.dst, o.stream = rec.stream;
            o.calls = rec.calls, o.rendezvous = rec.rendezvous, o.kernel = rec.kernel, o.comm = rec.comm;
            o.index = rec.index, o.bytes = rec.bytes, o.state = rec.state.load();
            std::atomic_thread_fence(std::memory_order_acquire);
            if (rec.seq.load() != seq) continue;  // rewritten while read
            v.by_key[emu_nccl_op_key(o, r)] = (int)v.ops.size();
            EmuNcclKernelView &k = v.kernels[EmuNcclKernelId(r, o.kernel)];
            k.ops.push_back((int)v.ops.size());
            k.streams.insert(o.stream);
            k.started |= o.state != EMU_NCCL_QUEUED;
            k.done &= o.state == EMU_NCCL_DONE;
            v.ops.push_back(o);
        }
    }
    return v;
}

static const EmuNcclCommView *emu_nccl_find_comm(const EmuNcclSnapshot &v, int rank, uint64_t id) {
    for (const EmuNcclCommView &c : v.comms[rank])
        if (c.id == id) return &c;
    return NULL;
}
static int emu_nccl_comm_rank_of(const EmuNcclCommView &c, int world_rank) {
    for (size_t i = 0; i < c.world.size(); i++)
        if (c.world[i] == world_rank) return (int)i;
    return -1;
}

// "ncclSend of 16384 bytes to rank 1 (message 3 on communicator 2 of ranks 0,1; ungrouped)"
static std::string emu_nccl_describe(const EmuNcclSnapshot &v, const EmuNcclOpView &o) {
    char buf[400];
    std::string where;
    const EmuNcclCommView *c = emu_nccl_find_comm(v, o.rank, o.comm);
    if (c) {
        where = "communicator " + std::to_string(c->number) + " of ranks ";
        for (size_t i = 0; i < c->world.size(); i++) where += (i ? "," : "") + std::to_string(c->world[i]);
        if (c->size > (int)c->world.size()) where += ",...";
    } else {
        where = "a communicator since destroyed";
    }
    if (o.kind == EMU_SEND)
        snprintf(buf, sizeof(buf), "ncclSend of %llu bytes to rank %d (message %llu on %s; %s)", (unsigned long long)o.bytes,
                 o.dst, (unsigned long long)o.index, where.c_str(), o.calls > 1 ? "in a group" : "ungrouped");
    else if (o.kind == EMU_RECV)
        snprintf(buf, sizeof(buf), "ncclRecv of %llu bytes from rank %d (message %llu on %s; %s)",
                 (unsigned long long)o.bytes, o.src, (unsigned long long)o.index, where.c_str(),
                 o.calls > 1 ? "in a group" : "ungrouped");
    else
        snprintf(buf, sizeof(buf), "%s of %llu bytes (collective %llu on %s)", emu_nccl_call_names[o.kind],
                 (unsigned long long)o.bytes, (unsigned long long)o.index, where.c_str());
    return buf;
}
static std::string emu_nccl_describe_kernel(const EmuNcclSnapshot &v, const EmuNcclKernelView &k) {
    std::string d = emu_nccl_describe(v, v.ops[k.ops[0]]);
    if (k.ops.size() > 1) d += " and the " + std::to_string(k.ops.size() - 1) + " other call(s) of its group";
    return d;
}

// The ranks whose matching operation o needs to have started for o to complete
// (receive: the sender; send above NCCL_BUFFSIZE: the receiver; collective: every member).
static std::vector<int> emu_nccl_partners(const EmuNcclSnapshot &v, const EmuNcclOpView &o) {
    std::vector<int> ranks;
    if (o.kind == EMU_RECV) ranks.push_back(o.src);
    else if (o.kind == EMU_SEND) { if (o.rendezvous) ranks.push_back(o.dst); }
    else if (const EmuNcclCommView *c = emu_nccl_find_comm(v, o.rank, o.comm))
        for (int w : c->world)
            if (w != o.rank) ranks.push_back(w);
    return ranks;
}
// The partner's matching operation on rank p (-1: not in its records), and whether p has issued it at all.
static int emu_nccl_partner_op(const EmuNcclSnapshot &v, const EmuNcclOpView &o, int p, bool *issued) {
    EmuNcclOpView m = o;
    if (emu_nccl_is_p2p(o.kind)) m.kind = o.kind == EMU_SEND ? EMU_RECV : EMU_SEND;
    auto it = v.by_key.find(emu_nccl_op_key(m, p));
    *issued = true;
    if (it != v.by_key.end()) return it->second;
    const EmuNcclCommView *c = emu_nccl_find_comm(v, p, o.comm);
    if (!c) return -1;  // (unknown: not taken as missing)
    if (!emu_nccl_is_p2p(o.kind)) *issued = c->colls > o.index;
    else if (o.kind == EMU_SEND) {
        int from = emu_nccl_comm_rank_of(*c, o.src);
        *issued = from < 0 || c->received[from] > o.index;
    } else {
        int to = emu_nccl_comm_rank_of(*c, o.dst);
        *issued = to < 0 || c->sent[to] > o.index;
    }
    return -1;
}

// ---------------------------------------------------------------------------
// graphs and cycles

// An edge of a graph below: from a node to the node `to` it waits for, and why
// (the report's clause is written from these only for a reported cycle).
enum EmuNcclWhy {
    EMU_QUEUED,   // a kernel not started -> the kernel before it on its stream
    EMU_WAITS,    // op (a call under way) -> the kernel of rank `rank`'s matching call, not started
    EMU_ISSUE,    // op -> rank `rank`'s host thread, which has not issued the matching call
    EMU_HOST,     // a host thread -> the kernel it waits for
    EMU_PREV,     // (order) a kernel -> the one its rank issued before it
    EMU_PARTNER,  // (order) a kernel -> the one rank `rank` issued before op, its matching call
};
struct EmuNcclEdge {
    int to, why, op, rank;
};
struct EmuNcclGraph {
    std::vector<EmuNcclKernelId> ids;       // the nodes' kernels; host threads: (rank, UINT64_MAX)
    std::vector<std::vector<EmuNcclEdge>> out;
    std::vector<std::set<uint64_t>> comms;  // per node: the communicators of its operations
};

// One cycle (nodes in order; each with the edge it leaves by), or empty.
static std::vector<std::pair<int, int>> emu_nccl_find_cycle(const EmuNcclGraph &g) {
    int n = (int)g.out.size();
    std::vector<int> color(n, 0), edge_at(n, 0), stack;
    for (int root = 0; root < n; root++) {
        if (color[root]) continue;
        stack.push_back(root);
        color[root] = 1;
        while (!stack.empty()) {
            int u = stack.back();
            if (edge_at[u] == (int)g.out[u].size()) {
                color[u] = 2;
                stack.pop_back();
                continue;
            }
            int w = g.out[u][edge_at[u]++].to;
            if (color[w] == 0) {
                color[w] = 1;
                stack.push_back(w);
            } else if (color[w] == 1) {  // back edge: the cycle is the stack from w
                std::vector<std::pair<int, int>> cycle;
                size_t from = 0;
                while (stack[from] != w) from++;
                for (size_t i = from; i < stack.size(); i++) cycle.push_back({stack[i], edge_at[stack[i]] - 1});
                return cycle;
            }
        }
    }
    return {};
}

// The kernels of each rank (in issue order) and of each rank's stream.
struct EmuNcclOrder {
    std::map<int, std::vector<uint64_t>> of_rank;
    std::map<std::pair<int, int>, std::vector<uint64_t>> of_stream;
};
static EmuNcclOrder emu_nccl_order(const EmuNcclSnapshot &v) {
    EmuNcclOrder ord;
    for (const auto &kv : v.kernels) {
        ord.of_rank[kv.first.first].push_back(kv.first.second);
        for (int s : kv.second.streams) ord.of_stream[{kv.first.first, s}].push_back(kv.first.second);
    }
    return ord;
}
// The kernel before `kernel` in a sorted list (-1: none recorded).
static int64_t emu_nccl_before(const std::vector<uint64_t> &list, uint64_t kernel) {
    auto it = std::lower_bound(list.begin(), list.end(), kernel);
    return it == list.begin() ? -1 : (int64_t) * (it - 1);
}

// The graph's nodes: the kernels for which keep() holds.
template <typename Keep>
static std::map<EmuNcclKernelId, int> emu_nccl_nodes(const EmuNcclSnapshot &v, EmuNcclGraph *g, Keep keep) {
    std::map<EmuNcclKernelId, int> node;
    for (const auto &kv : v.kernels)
        if (keep(kv.second)) {
            node[kv.first] = (int)g->ids.size();
            g->ids.push_back(kv.first);
            g->comms.emplace_back();
            for (int i : kv.second.ops) g->comms.back().insert(v.ops[i].comm);
        }
    g->out.resize(g->ids.size());
    return node;
}

// What each kernel under way waits for, as the emulation runs them: the kernel
// before it on its stream (not started); the partner's kernel not yet started,
// or the partner's host thread that has not issued the matching call (started).
// Nodes: kernels under way, then one per rank's host thread.
static EmuNcclGraph emu_nccl_wait_graph(const EmuNcclSnapshot &v) {
    EmuNcclOrder ord = emu_nccl_order(v);
    EmuNcclGraph g;
    std::map<EmuNcclKernelId, int> node = emu_nccl_nodes(v, &g, [](const EmuNcclKernelView &k) { return !k.done; });
    int hosts = (int)g.ids.size(), ranks = (int)v.host_waits.size();
    for (int r = 0; r < ranks; r++) {
        g.ids.push_back(EmuNcclKernelId(r, UINT64_MAX));
        g.comms.emplace_back();
    }
    g.out.resize(g.ids.size());
    for (int u = 0; u < hosts; u++) {
        const EmuNcclKernelView &k = v.kernels.at(g.ids[u]);
        int r = g.ids[u].first;
        if (!k.started) {
            for (int s : k.streams) {
                auto it = node.find(EmuNcclKernelId(r, (uint64_t)emu_nccl_before(ord.of_stream[{r, s}], g.ids[u].second)));
                if (it != node.end()) g.out[u].push_back({it->second, EMU_QUEUED, -1, r});
            }
            continue;
        }
        for (int i : k.ops) {
            if (v.ops[i].state == EMU_NCCL_DONE) continue;
            for (int p : emu_nccl_partners(v, v.ops[i])) {
                bool issued;
                int m = emu_nccl_partner_op(v, v.ops[i], p, &issued);
                if (m >= 0 && v.ops[m].state == EMU_NCCL_QUEUED) {
                    auto to = node.find(EmuNcclKernelId(p, v.ops[m].kernel));
                    if (to != node.end()) g.out[u].push_back({to->second, EMU_WAITS, i, p});
                } else if (m < 0 && !issued && p < ranks) {
                    g.out[u].push_back({hosts + p, EMU_ISSUE, i, p});
                }
            }
        }
    }
    for (int r = 0; r < ranks; r++) {
        auto it = node.find(EmuNcclKernelId(r, (uint64_t)v.host_waits[r]));
        if (v.host_waits[r] >= 0 && it != node.end()) g.out[hosts + r].push_back({it->second, EMU_HOST, -1, r});
    }
    return g;
}

// What each completed kernel would wait for if every rank ran its kernels one
// at a time in the order it issued them: its rank's previous kernel, and each
// partner's kernel before the partner's matching one. Nodes: completed kernels.
static EmuNcclGraph emu_nccl_order_graph(const EmuNcclSnapshot &v) {
    EmuNcclOrder ord = emu_nccl_order(v);
    EmuNcclGraph g;
    std::map<EmuNcclKernelId, int> node = emu_nccl_nodes(v, &g, [](const EmuNcclKernelView &k) { return k.done; });
    for (size_t u = 0; u < g.ids.size(); u++) {
        const EmuNcclKernelView &k = v.kernels.at(g.ids[u]);
        int r = g.ids[u].first;
        auto it = node.find(EmuNcclKernelId(r, (uint64_t)emu_nccl_before(ord.of_rank[r], g.ids[u].second)));
        if (it != node.end()) g.out[u].push_back({it->second, EMU_PREV, -1, r});
        for (int i : k.ops)
            for (int p : emu_nccl_partners(v, v.ops[i])) {
                bool issued;
                int m = emu_nccl_partner_op(v, v.ops[i], p, &issued);
                if (m < 0) continue;
                auto at = node.find(EmuNcclKernelId(p, (uint64_t)emu_nccl_before(ord.of_rank[p], v.ops[m].kernel)));
                if (at != node.end()) g.out[u].push_back({at->second, EMU_PARTNER, m, p});
            }
    }
    return g;
}

// An edge's clause: whole, or continuing a clause that ended naming its node ("which ...").
static std::string emu_nccl_clause(const EmuNcclSnapshot &v, const EmuNcclGraph &g, int from, const EmuNcclEdge &e,
                                   bool continues) {
    auto kernel = [&](int node) { return emu_nccl_describe_kernel(v, v.kernels.at(g.ids[node])); };
    std::string r = "rank " + std::to_string(g.ids[from].first), p = "rank " + std::to_string(e.rank);
    if (e.why == EMU_QUEUED)
        return (continues ? "which" : r + "'s " + kernel(from)) + " is queued on its stream behind " + r + "'s " + kernel(e.to);
    if (e.why == EMU_HOST) return (continues ? "while " : "") + r + "'s host thread waits for its " + kernel(e.to);
    if (e.why == EMU_PREV) return r + " issued " + kernel(e.to) + " before " + kernel(from);
    const EmuNcclOpView &o = v.ops[e.op];
    if (e.why == EMU_PARTNER) return p + " issued " + kernel(e.to) + " before its " + emu_nccl_describe(v, o);
    const char *call = emu_nccl_call_names[o.kind == EMU_SEND ? EMU_RECV : o.kind == EMU_RECV ? EMU_SEND : o.kind];
    bool alone = v.kernels.at(g.ids[from]).ops.size() == 1;
    return (continues && alone ? "which" : r + "'s " + emu_nccl_describe(v, o)) +
           (e.why == EMU_WAITS ? " waits for " + p + "'s matching " + call : " waits for " + p + " to issue its matching " + call);
}

// The cycle's clauses in order, each after the first continuing the one before where it can.
static std::string emu_nccl_cycle_text(const EmuNcclSnapshot &v, const EmuNcclGraph &g,
                                       const std::vector<std::pair<int, int>> &cycle) {
    std::string text;
    for (size_t i = 0; i < cycle.size(); i++) {
        const EmuNcclEdge &e = g.out[cycle[i].first][cycle[i].second];
        bool continues = i > 0 && e.why != EMU_PREV && e.why != EMU_PARTNER;
        text += (i == 0 ? "" : continues ? ", " : "; ") + emu_nccl_clause(v, g, cycle[i].first, e, continues);
    }
    return text;
}

// The watchdog's state between looks (world rank 0's engine thread).
struct EmuNcclWatch {
    std::vector<EmuNcclKernelId> cycle;  // the deadlock seen last time, its ranks' versions
    std::vector<uint64_t> versions;
    int seen = 0;
    uint64_t ordered_upto = 0;           // the records' total when the order was last checked
};

[[noreturn]] static void emu_nccl_report(const std::string &what) {
    fprintf(stderr, "error: emulated NCCL: %s\n", what.c_str());
    fflush(stderr);
    abort();
}

// Deadlock: a cycle in the wait graph, unchanged (and its ranks' records too)
// over three looks in a row.
static void emu_nccl_watch_deadlock(EmuNcclShared *sh, EmuNcclWatch *w, const EmuNcclSnapshot &v) {
    EmuNcclGraph g = emu_nccl_wait_graph(v);
    std::vector<std::pair<int, int>> cycle = emu_nccl_find_cycle(g);
    std::vector<EmuNcclKernelId> nodes;
    std::vector<uint64_t> versions;
    for (auto &c : cycle) {
        nodes.push_back(g.ids[c.first]);
        versions.push_back(v.versions[g.ids[c.first].first]);
    }
    if (cycle.empty() || nodes != w->cycle || versions != w->versions) {
        w->cycle = nodes;
        w->versions = versions;
        w->seen = cycle.empty() ? 0 : 1;
        return;
    }
    if (++w->seen >= 3)
        emu_nccl_report("deadlock, found by the emulator's watchdog: " + emu_nccl_cycle_text(v, g, cycle) +
                        " (NCCL: point-to-point calls block until their partners are reached; calls that must "
                        "progress together belong in one ncclGroupStart/ncclGroupEnd; NCCL_BUFFSIZE=" +
                        std::to_string(sh->buffsize) + ")");
}

// Order: a cycle through two or more communicators in the order graph.
static void emu_nccl_watch_order(const EmuNcclSnapshot &v) {
    EmuNcclGraph g = emu_nccl_order_graph(v);
    std::vector<std::pair<int, int>> loop = emu_nccl_find_cycle(g);
    std::set<uint64_t> comms;
    for (auto &c : loop) comms.insert(g.comms[c.first].begin(), g.comms[c.first].end());
    if (comms.size() >= 2)
        emu_nccl_report("operations on " + std::to_string(comms.size()) + " communicators issued in different orders "
                        "by their ranks (NCCL requires one order across ranks: its kernels may run one at a time, "
                        "and then these wait for each other forever): " + emu_nccl_cycle_text(v, g, loop));
}

// One look at every rank's records (world rank 0's engine thread, twice a
// second; the order again once every rank has finished, final).
static void emu_nccl_watch(EmuNcclShared *sh, EmuNcclWatch *w, bool final) {
    EmuNcclSnapshot v = emu_nccl_snapshot(sh);
    if (!final) emu_nccl_watch_deadlock(sh, w, v);
    uint64_t total = 0;
    for (uint64_t x : v.versions) total += x;
    if (total == w->ordered_upto && !final) return;
    w->ordered_upto = total;
    emu_nccl_watch_order(v);
}

#endif  // LLMC_MPI

#endif  // LLMC_NCCL_EMU_CHECKS_H
