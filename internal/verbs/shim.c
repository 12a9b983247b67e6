//go:build linux && cgo

/*
 * shim.c - libibverbs through dlopen/dlsym. No libibverbs header or library
 * is needed to build this. The exported entry points are looked up with the
 * symbol version that carries today's ABI (IBVERBS_1.1 for the calls that
 * also have a 1.0 compat variant). The header's inline functions
 * (ibv_poll_cq, ibv_req_notify_cq, ibv_post_send, ibv_post_recv) are done
 * here the way verbs.h does them: through ibv_context.ops.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

static struct {
	void *handle;
	struct gxv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct gxv_device **);
	const char *(*get_device_name)(struct gxv_device *);
	struct gxv_context *(*open_device)(struct gxv_device *);
	int (*close_device)(struct gxv_context *);
	int (*query_device)(struct gxv_context *, struct gxv_device_attr *);
	int (*query_port)(struct gxv_context *, uint8_t, struct gxv_port_attr *);
	int (*query_gid)(struct gxv_context *, uint8_t, int, struct gxv_gid *);
	struct gxv_pd *(*alloc_pd)(struct gxv_context *);
	int (*dealloc_pd)(struct gxv_pd *);
	struct gxv_mr *(*reg_mr)(struct gxv_pd *, void *, size_t, int);
	struct gxv_mr *(*reg_mr_iova2)(struct gxv_pd *, void *, size_t, uint64_t, unsigned int);
	struct gxv_mr *(*reg_dmabuf_mr)(struct gxv_pd *, uint64_t, size_t, uint64_t, int, int);
	int (*dereg_mr)(struct gxv_mr *);
	struct gxv_comp_channel *(*create_comp_channel)(struct gxv_context *);
	int (*destroy_comp_channel)(struct gxv_comp_channel *);
	struct gxv_cq *(*create_cq)(struct gxv_context *, int, void *, struct gxv_comp_channel *, int);
	int (*destroy_cq)(struct gxv_cq *);
	int (*get_cq_event)(struct gxv_comp_channel *, struct gxv_cq **, void **);
	void (*ack_cq_events)(struct gxv_cq *, unsigned int);
	struct gxv_qp *(*create_qp)(struct gxv_pd *, struct gxv_qp_init_attr *);
	int (*modify_qp)(struct gxv_qp *, struct gxv_qp_attr *, int);
	int (*query_qp)(struct gxv_qp *, struct gxv_qp_attr *, int, struct gxv_qp_init_attr *);
	int (*destroy_qp)(struct gxv_qp *);
} L;

#define SYM(f, ver, opt) { "ibv_" #f, ver, offsetof(__typeof__(L), f), opt }
static const struct {
	const char *name, *version;
	size_t off;
	int optional;
} syms[] = {
	SYM(get_device_list, "IBVERBS_1.1", 0),
	SYM(free_device_list, "IBVERBS_1.1", 0),
	SYM(get_device_name, "IBVERBS_1.1", 0),
	SYM(open_device, "IBVERBS_1.1", 0),
	SYM(close_device, "IBVERBS_1.1", 0),
	SYM(query_device, "IBVERBS_1.1", 0),
	SYM(query_port, "IBVERBS_1.1", 0),
	SYM(query_gid, "IBVERBS_1.1", 0),
	SYM(alloc_pd, "IBVERBS_1.1", 0),
	SYM(dealloc_pd, "IBVERBS_1.1", 0),
	SYM(reg_mr, "IBVERBS_1.1", 0),
	SYM(reg_mr_iova2, "IBVERBS_1.8", 1),
	SYM(reg_dmabuf_mr, "IBVERBS_1.12", 1),
	SYM(dereg_mr, "IBVERBS_1.1", 0),
	SYM(create_comp_channel, "IBVERBS_1.0", 0),
	SYM(destroy_comp_channel, "IBVERBS_1.0", 0),
	SYM(create_cq, "IBVERBS_1.1", 0),
	SYM(destroy_cq, "IBVERBS_1.1", 0),
	SYM(get_cq_event, "IBVERBS_1.1", 0),
	SYM(ack_cq_events, "IBVERBS_1.1", 0),
	SYM(create_qp, "IBVERBS_1.1", 0),
	SYM(modify_qp, "IBVERBS_1.1", 0),
	SYM(query_qp, "IBVERBS_1.1", 0),
	SYM(destroy_qp, "IBVERBS_1.1", 0),
};

static char load_err[512];

const char *gxv_load_error(void) { return load_err; }

int gxv_load(const char *libname)
{
	void *h = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(load_err, sizeof load_err, "dlopen %s: %s", libname, e ? e : "unknown error");
		return -1;
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlvsym(h, syms[i].name, syms[i].version);
		if (!p)
			p = dlsym(h, syms[i].name);
		if (!p && !syms[i].optional) {
			snprintf(load_err, sizeof load_err, "%s: no symbol %s", libname, syms[i].name);
			dlclose(h);
			memset(&L, 0, sizeof L);
			return -1;
		}
		memcpy((char *)&L + syms[i].off, &p, sizeof p);
	}
	L.handle = h;
	return 0;
}

int gxv_have(const char *what)
{
	if (!strcmp(what, "reg_dmabuf_mr"))
		return L.reg_dmabuf_mr != NULL;
	if (!strcmp(what, "reg_mr_iova2"))
		return L.reg_mr_iova2 != NULL;
	return L.handle != NULL;
}

/* rc: the verb's int result (0, a positive errno value, or -1 with errno). */
static int norm(int rc)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return rc;
	return errno ? errno : EIO;
}

#define NEED(f, fail) do { if (!L.f) { errno = ENOSYS; return fail; } } while (0)

struct gxv_device **gxv_get_device_list(int *num)
{
	*num = 0;
	NEED(get_device_list, NULL);
	return L.get_device_list(num);
}

void gxv_free_device_list(struct gxv_device **list)
{
	if (L.free_device_list && list)
		L.free_device_list(list);
}

const char *gxv_get_device_name(struct gxv_device *dev)
{
	NEED(get_device_name, NULL);
	return L.get_device_name(dev);
}

struct gxv_context *gxv_open_device(struct gxv_device *dev)
{
	NEED(open_device, NULL);
	return L.open_device(dev);
}

int gxv_close_device(struct gxv_context *ctx)
{
	NEED(close_device, ENOSYS);
	return norm(L.close_device(ctx));
}

int gxv_query_device(struct gxv_context *ctx, struct gxv_device_attr *attr)
{
	NEED(query_device, ENOSYS);
	errno = 0;
	return norm(L.query_device(ctx, attr));
}

int gxv_query_port(struct gxv_context *ctx, uint8_t port, struct gxv_port_attr *attr)
{
	NEED(query_port, ENOSYS);
	memset(attr, 0, sizeof *attr);
	errno = 0;
	return norm(L.query_port(ctx, port, attr));
}

int gxv_query_gid(struct gxv_context *ctx, uint8_t port, int index, struct gxv_gid *gid)
{
	NEED(query_gid, ENOSYS);
	errno = 0;
	int rc = L.query_gid(ctx, port, index, gid);
	if (rc && !errno)
		errno = EINVAL;
	return norm(rc);
}

struct gxv_pd *gxv_alloc_pd(struct gxv_context *ctx)
{
	NEED(alloc_pd, NULL);
	return L.alloc_pd(ctx);
}

int gxv_dealloc_pd(struct gxv_pd *pd)
{
	NEED(dealloc_pd, ENOSYS);
	errno = 0;
	return norm(L.dealloc_pd(pd));
}

/*
 * Like the header's ibv_reg_mr/ibv_reg_mr_iova macros: ibv_reg_mr_iova2
 * (which masks optional access flags the kernel lacks) when the library has
 * it, else the 1.1 ibv_reg_mr for iova == addr.
 */
struct gxv_mr *gxv_reg_mr(struct gxv_pd *pd, uint64_t addr, uint64_t length, uint64_t iova, int access)
{
	if (L.reg_mr_iova2)
		return L.reg_mr_iova2(pd, (void *)(uintptr_t)addr, length, iova, (unsigned int)access);
	NEED(reg_mr, NULL);
	if (iova != addr) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return L.reg_mr(pd, (void *)(uintptr_t)addr, length, access);
}

struct gxv_mr *gxv_reg_dmabuf_mr(struct gxv_pd *pd, uint64_t offset, uint64_t length, uint64_t iova, int fd, int access)
{
	if (!L.reg_dmabuf_mr) {
		/* libibverbs older than rdma-core 34 (IBVERBS_1.12) */
		errno = EOPNOTSUPP;
		return NULL;
	}
	return L.reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

int gxv_dereg_mr(struct gxv_mr *mr)
{
	NEED(dereg_mr, ENOSYS);
	errno = 0;
	return norm(L.dereg_mr(mr));
}

struct gxv_comp_channel *gxv_create_comp_channel(struct gxv_context *ctx)
{
	NEED(create_comp_channel, NULL);
	return L.create_comp_channel(ctx);
}

int gxv_destroy_comp_channel(struct gxv_comp_channel *ch)
{
	NEED(destroy_comp_channel, ENOSYS);
	errno = 0;
	return norm(L.destroy_comp_channel(ch));
}

struct gxv_cq *gxv_create_cq(struct gxv_context *ctx, int cqe, struct gxv_comp_channel *ch, int vector)
{
	NEED(create_cq, NULL);
	return L.create_cq(ctx, cqe, NULL, ch, vector);
}

int gxv_destroy_cq(struct gxv_cq *cq)
{
	NEED(destroy_cq, ENOSYS);
	errno = 0;
	return norm(L.destroy_cq(cq));
}

/* ibv_req_notify_cq (inline in verbs.h) */
int gxv_req_notify_cq(struct gxv_cq *cq, int solicited_only)
{
	errno = 0;
	return norm(cq->context->ops.req_notify_cq(cq, solicited_only));
}

/* NULL with errno EAGAIN when the (non-blocking) channel has no event. */
struct gxv_cq *gxv_get_cq_event(struct gxv_comp_channel *ch)
{
	struct gxv_cq *cq = NULL;
	void *cq_context;
	NEED(get_cq_event, NULL);
	errno = 0;
	if (L.get_cq_event(ch, &cq, &cq_context)) {
		if (!errno)
			errno = EIO;
		return NULL;
	}
	return cq;
}

void gxv_ack_cq_events(struct gxv_cq *cq, unsigned int n)
{
	if (L.ack_cq_events && n)
		L.ack_cq_events(cq, n);
}

/* ibv_poll_cq (inline in verbs.h): >= 0 completions, or -errno. */
int gxv_poll_cq(struct gxv_cq *cq, int n, struct gxv_wc *wc)
{
	errno = 0;
	int rc = cq->context->ops.poll_cq(cq, n, wc);
	if (rc < 0)
		return errno ? -errno : -EIO;
	return rc;
}

struct gxv_qp *gxv_create_qp(struct gxv_pd *pd, struct gxv_qp_init_attr *attr)
{
	NEED(create_qp, NULL);
	return L.create_qp(pd, attr);
}

int gxv_modify_qp(struct gxv_qp *qp, struct gxv_qp_attr *attr, int mask)
{
	NEED(modify_qp, ENOSYS);
	errno = 0;
	return norm(L.modify_qp(qp, attr, mask));
}

int gxv_query_qp(struct gxv_qp *qp, struct gxv_qp_attr *attr, int mask, struct gxv_qp_init_attr *init)
{
	NEED(query_qp, ENOSYS);
	errno = 0;
	return norm(L.query_qp(qp, attr, mask, init));
}

int gxv_destroy_qp(struct gxv_qp *qp)
{
	NEED(destroy_qp, ENOSYS);
	errno = 0;
	return norm(L.destroy_qp(qp));
}

/* ibv_post_send (inline in verbs.h) */
int64_t gxv_post_send(struct gxv_qp *qp, struct gxv_send_wr *wr)
{
	void *bad = NULL;
	errno = 0;
	int rc = norm(qp->context->ops.post_send(qp, wr, &bad));
	if (!rc)
		return 0;
	int64_t i = 0;
	for (struct gxv_send_wr *w = wr; w && (void *)w != bad; w = w->next)
		i++;
	return ((int64_t)rc << 32) | (bad ? i : 0);
}

/* ibv_post_recv (inline in verbs.h) */
int64_t gxv_post_recv(struct gxv_qp *qp, struct gxv_recv_wr *wr)
{
	void *bad = NULL;
	errno = 0;
	int rc = norm(qp->context->ops.post_recv(qp, wr, &bad));
	if (!rc)
		return 0;
	int64_t i = 0;
	for (struct gxv_recv_wr *w = wr; w && (void *)w != bad; w = w->next)
		i++;
	return ((int64_t)rc << 32) | (bad ? i : 0);
}
