// The contract's entry for one step (a build's ninja, the emulator's child): exec'd by the grader
// in place of the step's command, it does what must happen between fork and exec, then execs the
// command. The grader starts it without a Python fork (no preexec_fn: subprocess's vfork), and it
// forks only itself, a small process: the whole entry costs about a millisecond, where the same
// steps in Python between fork and exec (three forks of the grader's memory) cost 10 ms.
//
// Its plan, in order (each option at most once but -c, -r, -R, -l and -b), is written by
// grader/core/view.py (Entry.argv); what the view's entry said is written to the -o descriptor
// as "<root problem>\t<PID problem>" (empty: held), and a step that could not go on writes
// "\x01<why>" there and exits 126 (View.said and View.failed read them in the grader):
//   -s                 its own session (setsid)
//   -c PATH            join a control group: write 0 to its cgroup.procs file
//   -n N               nice N
//   -r RES SOFT HARD   a resource limit (clamped in the grader to the inherited hard limit)
//   -N                 a network namespace of its own (nothing in it), where the kernel allows
//   -k SIG             the death signal (again after the view and the change of user, which clear it)
//   -V ROOT CWD        the view: a private mount namespace whose root, a small tmpfs on ROOT (an
//                      empty folder beside the step's own), holds each -l link and -b bind at its
//                      own path; chroot into it and chdir CWD
//   -P                 and a PID namespace of its own, whose fresh /proc shows its processes alone
//   -i UID GID         not root: a user namespace of its own mapping UID and GID to themselves
//   -l PATH TARGET     a link in the view
//   -b PATH DIR REC    a bind (DIR 1: a folder; REC 1: with what is mounted beneath it)
//   -o FD              where the view's entry says how it went
//   -u UID GID         then that user (no supplementary groups)
//   -R RES SOFT HARD   a resource limit set after the view (the open files: its pipe needs two)
//   -L FD              then the Landlock ruleset FD, made in the grader (no_new_privs first)
//   --  COMMAND ARGS   exec'd (PATH searched, in the view)
//
// With -P this process stays outside the new PID namespace: it starts the namespace's first
// process, waits for it and ends as the step's process ended (the same exit code, or killed by the
// same signal: a child the seccomp filter killed is told by its SIGSYS). That first process (pid 1)
// starts the step's process, reaps every orphan until the step's process ends, then ends, which
// ends every process left in the namespace. It runs nothing of the step's and is not dumpable, so
// no process of the step may read its memory or environment.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MOUNTS 256
#define MAX_LIMITS 16

struct mount_at {
    const char *path;
    const char *target;   // a link's target, or NULL: a bind
    int dir, rec;
};

struct limit {
    int late;
    int resource;
    unsigned long long soft, hard;
};

static struct {
    int session, nice, no_network, death, own_pids, said_fd, ruleset_fd, map, drop;
    uid_t map_uid, uid;
    gid_t map_gid, gid;
    const char *root, *cwd;
    const char *groups[8];
    int n_groups;
    struct mount_at mounts[MAX_MOUNTS];
    int n_mounts;
    struct limit limits[MAX_LIMITS];
    int n_limits;
    char **command;
} plan = {.said_fd = -1, .ruleset_fd = -1};

static char said[1024];

static void say(const char *text) {
    if (plan.said_fd >= 0) {
        ssize_t ignored = write(plan.said_fd, text, strlen(text));
        (void)ignored;
    }
}

// A step that cannot go on: said (after what the view said, if anything), and exit 126.
static void fail(const char *what) {
    char line[600];
    snprintf(line, sizeof line, "\x01%s (%s)", what, strerror(errno));
    say(line);
    _exit(126);
}

static int parse(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        const char *o = argv[i];
        int left = argc - i - 1;
        if (!strcmp(o, "--")) {
            plan.command = argv + i + 1;
            return i + 1 < argc ? 0 : -1;
        } else if (!strcmp(o, "-s")) {
            plan.session = 1;
        } else if (!strcmp(o, "-N")) {
            plan.no_network = 1;
        } else if (!strcmp(o, "-P")) {
            plan.own_pids = 1;
        } else if (!strcmp(o, "-c") && left >= 1 && plan.n_groups < 8) {
            plan.groups[plan.n_groups++] = argv[++i];
        } else if (!strcmp(o, "-n") && left >= 1) {
            plan.nice = atoi(argv[++i]);
        } else if (!strcmp(o, "-k") && left >= 1) {
            plan.death = atoi(argv[++i]);
        } else if (!strcmp(o, "-o") && left >= 1) {
            plan.said_fd = atoi(argv[++i]);
        } else if (!strcmp(o, "-L") && left >= 1) {
            plan.ruleset_fd = atoi(argv[++i]);
        } else if ((!strcmp(o, "-r") || !strcmp(o, "-R")) && left >= 3 && plan.n_limits < MAX_LIMITS) {
            struct limit *l = &plan.limits[plan.n_limits++];
            l->late = o[1] == 'R';
            l->resource = atoi(argv[i + 1]);
            l->soft = strtoull(argv[i + 2], 0, 10);
            l->hard = strtoull(argv[i + 3], 0, 10);
            i += 3;
        } else if (!strcmp(o, "-V") && left >= 2) {
            plan.root = argv[++i];
            plan.cwd = argv[++i];
        } else if ((!strcmp(o, "-i") || !strcmp(o, "-u")) && left >= 2) {
            uid_t u = (uid_t)strtoul(argv[++i], 0, 10);
            gid_t g = (gid_t)strtoul(argv[++i], 0, 10);
            if (o[1] == 'i') plan.map = 1, plan.map_uid = u, plan.map_gid = g;
            else plan.drop = 1, plan.uid = u, plan.gid = g;
        } else if (!strcmp(o, "-l") && left >= 2 && plan.n_mounts < MAX_MOUNTS) {
            plan.mounts[plan.n_mounts++] = (struct mount_at){argv[i + 1], argv[i + 2], 0, 0};
            i += 2;
        } else if (!strcmp(o, "-b") && left >= 3 && plan.n_mounts < MAX_MOUNTS) {
            plan.mounts[plan.n_mounts++] = (struct mount_at){argv[i + 1], 0, atoi(argv[i + 2]), atoi(argv[i + 3])};
            i += 3;
        } else {
            return -1;
        }
    }
    return -1;
}

static void set_limits(int late) {
    for (int i = 0; i < plan.n_limits; ++i) {
        struct limit *l = &plan.limits[i];
        struct rlimit r = {(rlim_t)l->soft, (rlim_t)l->hard};
        if (l->late == late && setrlimit(l->resource, &r) != 0 && l->resource != RLIMIT_NPROC) fail("a resource limit");
    }
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

// A mount namespace (and more) of this process's own; not root: in a user namespace of its own
// too, mapping its user and group to themselves. 0, or -1 with why in problem.
static int unshared(int more, char *problem, size_t cap) {
    if (plan.map) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS | more) != 0) {
            snprintf(problem, cap, "no user namespace (%s)", strerror(errno));
            return -1;
        }
        char line[64];
        int bad = write_file("/proc/self/setgroups", "deny");
        snprintf(line, sizeof line, "%u %u 1", plan.map_uid, plan.map_uid);
        bad = bad || write_file("/proc/self/uid_map", line);
        snprintf(line, sizeof line, "%u %u 1", plan.map_gid, plan.map_gid);
        bad = bad || write_file("/proc/self/gid_map", line);
        if (bad) {
            snprintf(problem, cap, "the user namespace's map (%s)", strerror(errno));
            return -1;
        }
    } else if (unshare(CLONE_NEWNS | more) != 0) {
        snprintf(problem, cap, "no mount namespace (%s)", strerror(errno));
        return -1;
    }
    return 0;
}

static void close_all_but(int keep) {
    for (int fd = 0; fd < keep; ++fd) close(fd);
    syscall(SYS_close_range, keep + 1, ~0U, 0);
}

// This process, outside the new PID namespace: ends as the step's process ended.
static void end_as(int status) {
    if (WIFSIGNALED(status)) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        signal(WTERMSIG(status), SIG_DFL);
        kill(getpid(), WTERMSIG(status));
        _exit(128 + WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

// Returns in the step's process alone (pid 2 of the new namespace).
static void first_process(void) {
    static const int defaults[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; ++i) signal(defaults[i], SIG_DFL);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);        // the grader ended: this, then pid 1, then all
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) fail("the view's pipe");
    pid_t first = fork();
    if (first < 0) fail("the PID namespace's first process");
    if (first > 0) {                                  // holding nothing of the step's
        close_all_but(p[0]);
        int status = 126 << 8, got;
        while (waitpid(first, &got, 0) < 0 && errno == EINTR) {}
        if (read(p[0], &status, sizeof status) != sizeof status) status = 126 << 8;
        end_as(status);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    pid_t step = fork();
    if (step < 0) _exit(126);
    if (step == 0) {
        close(p[0]);
        close(p[1]);
        return;
    }
    close_all_but(p[1]);
    int status = 126 << 8;
    for (;;) {                                        // every orphan of the step's reaped, until it ends
        int got;
        pid_t pid = waitpid(-1, &got, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        if (pid == step) {
            status = got;
            break;
        }
    }
    ssize_t ignored = write(p[1], &status, sizeof status);
    (void)ignored;
    _exit(0);
}

static void make_dirs(char *path) {               // mkdir -p, path modified in place and restored
    for (char *s = path + 1; *s; ++s) {
        if (*s == '/') {
            *s = 0;
            mkdir(path, 0755);
            *s = '/';
        }
    }
    mkdir(path, 0755);
}

// The view's root laid out and entered; "" written to problem when done.
static void lay_out(int fresh_proc, char *problem, size_t cap, char *proc_bound, size_t bound_cap) {
    if (mount(0, "/", 0, MS_REC | MS_PRIVATE, 0) != 0) {
        snprintf(problem, cap, "/ could not be made private (%s)", strerror(errno));
        return;
    }
    if (mount("tmpfs", plan.root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m") != 0) {
        snprintf(problem, cap, "no tmpfs for the view (%s)", strerror(errno));
        return;
    }
    char at[4096], parent[4096];
    for (int i = 0; i < plan.n_mounts; ++i) {
        struct mount_at *m = &plan.mounts[i];
        snprintf(at, sizeof at, "%s%s", plan.root, m->path);
        snprintf(parent, sizeof parent, "%s", at);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = 0;
        if (m->target) {
            make_dirs(parent);
            if (symlink(m->target, at) != 0 && errno != EEXIST) {
                snprintf(problem, cap, "the view could not be laid out (%s: %s)", m->path, strerror(errno));
                return;
            }
            continue;
        }
        if (m->dir) {
            make_dirs(at);
        } else {
            make_dirs(parent);
            int fd = open(at, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
            if (fd >= 0) close(fd);
        }
        if (fresh_proc && !strcmp(m->path, "/proc")) {
            if (mount("proc", at, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0) == 0) continue;
            snprintf(proc_bound, bound_cap, "%s", strerror(errno));   // where the machine forbids it
            fresh_proc = 0;
        }
        if (mount(m->path, at, 0, MS_BIND | (m->rec ? MS_REC : 0), 0) != 0) {
            snprintf(problem, cap, "%s could not be bound (%s)", m->path, strerror(errno));
            return;
        }
    }
    if (chroot(plan.root) != 0) {
        snprintf(problem, cap, "chroot (%s)", strerror(errno));
        return;
    }
    if (chdir(plan.cwd) != 0) snprintf(problem, cap, "chdir %s (%s)", plan.cwd, strerror(errno));
}

// Into the view (and its PID namespace); what it said, in said.
static void enter_view(void) {
    char root[600] = "", pids[600] = "", bound[200] = "";
    if (plan.own_pids && unshared(CLONE_NEWPID, pids, sizeof pids) != 0) {
        char why[500];
        snprintf(why, sizeof why, "%s", pids);
        snprintf(pids, sizeof pids, "no PID namespace (%s)", why);
    }
    if (!plan.own_pids || pids[0]) {
        if (unshared(0, root, sizeof root) != 0) {
            snprintf(said, sizeof said, "%s\t%s", root, pids[0] ? pids : "not tried");
            return;
        }
    } else {
        first_process();
    }
    lay_out(plan.own_pids && !pids[0], root, sizeof root, bound, sizeof bound);
    if (plan.own_pids && !pids[0] && bound[0])
        snprintf(pids, sizeof pids, "its own PID namespace, the grader's /proc bound (%s)", bound);
    snprintf(said, sizeof said, "%s\t%s", root, pids);
}

int main(int argc, char **argv) {
    if (parse(argc, argv) != 0) {
        fprintf(stderr, "grader's view launcher: a plan it cannot read (grader/core/view.c)\n");
        return 126;
    }
    if (plan.said_fd >= 0) fcntl(plan.said_fd, F_SETFD, FD_CLOEXEC);
    if (plan.ruleset_fd >= 0) fcntl(plan.ruleset_fd, F_SETFD, FD_CLOEXEC);
    if (plan.session) setsid();
    for (int i = 0; i < plan.n_groups; ++i)      // before anything it starts: each is in it too
        if (write_file(plan.groups[i], "0") != 0) fail("its control group could not be joined");
    if (plan.nice && nice(plan.nice) == -1 && errno) fail("nice");
    if (plan.death) prctl(PR_SET_PDEATHSIG, plan.death, 0, 0, 0);
    set_limits(0);
    if (plan.no_network) unshare(CLONE_NEWNET);  // where the kernel allows: nothing in it
    if (plan.root) {
        enter_view();
        say(said[0] || said[1] ? said : "-");
        if (plan.death) prctl(PR_SET_PDEATHSIG, plan.death, 0, 0, 0);   // a user namespace clears it
    }
    if (plan.drop) {
        if (setgroups(0, 0) != 0 || setresgid(plan.gid, plan.gid, plan.gid) != 0 ||
            setresuid(plan.uid, plan.uid, plan.uid) != 0)
            fail("the step's user could not be taken");
        if (plan.death) prctl(PR_SET_PDEATHSIG, plan.death, 0, 0, 0);   // the change of user clears it
    }
    set_limits(1);
    if (plan.ruleset_fd >= 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(446 /* landlock_restrict_self */, plan.ruleset_fd, 0) != 0)
            fail("the file-system wall could not be applied");
        close(plan.ruleset_fd);
    }
    execvp(plan.command[0], plan.command);
    char what[300];
    snprintf(what, sizeof what, "%s could not be started", plan.command[0]);
    fail(what);
    return 126;
}
