/*
 * shim.h - gxfer's C shim over libibverbs, loaded with dlopen at run time.
 *
 * Every function returns 0 or a positive errno value (int results), or NULL
 * with errno set (pointer results). Before gxv_load succeeds, every call
 * fails with ENOSYS.
 */
#ifndef GXFER_VERBS_SHIM_H
#define GXFER_VERBS_SHIM_H

#include "abi.h"

int gxv_load(const char *libname);
const char *gxv_load_error(void);
int gxv_have(const char *what);

struct gxv_device **gxv_get_device_list(int *num);
void gxv_free_device_list(struct gxv_device **list);
const char *gxv_get_device_name(struct gxv_device *dev);
struct gxv_context *gxv_open_device(struct gxv_device *dev);
int gxv_close_device(struct gxv_context *ctx);
int gxv_query_device(struct gxv_context *ctx, struct gxv_device_attr *attr);
int gxv_query_port(struct gxv_context *ctx, uint8_t port, struct gxv_port_attr *attr);
int gxv_query_gid(struct gxv_context *ctx, uint8_t port, int index, struct gxv_gid *gid);

struct gxv_pd *gxv_alloc_pd(struct gxv_context *ctx);
int gxv_dealloc_pd(struct gxv_pd *pd);
struct gxv_mr *gxv_reg_mr(struct gxv_pd *pd, uint64_t addr, uint64_t length, uint64_t iova, int access);
struct gxv_mr *gxv_reg_dmabuf_mr(struct gxv_pd *pd, uint64_t offset, uint64_t length, uint64_t iova, int fd, int access);
int gxv_dereg_mr(struct gxv_mr *mr);

struct gxv_comp_channel *gxv_create_comp_channel(struct gxv_context *ctx);
int gxv_destroy_comp_channel(struct gxv_comp_channel *ch);
struct gxv_cq *gxv_create_cq(struct gxv_context *ctx, int cqe, struct gxv_comp_channel *ch, int vector);
int gxv_destroy_cq(struct gxv_cq *cq);
int gxv_req_notify_cq(struct gxv_cq *cq, int solicited_only);
struct gxv_cq *gxv_get_cq_event(struct gxv_comp_channel *ch);
void gxv_ack_cq_events(struct gxv_cq *cq, unsigned int n);
int gxv_poll_cq(struct gxv_cq *cq, int n, struct gxv_wc *wc);

struct gxv_qp *gxv_create_qp(struct gxv_pd *pd, struct gxv_qp_init_attr *attr);
int gxv_modify_qp(struct gxv_qp *qp, struct gxv_qp_attr *attr, int mask);
int gxv_query_qp(struct gxv_qp *qp, struct gxv_qp_attr *attr, int mask, struct gxv_qp_init_attr *init);
int gxv_destroy_qp(struct gxv_qp *qp);

/* 0 on success, else (errno << 32) | index of the first work request not posted. */
int64_t gxv_post_send(struct gxv_qp *qp, struct gxv_send_wr *wr);
int64_t gxv_post_recv(struct gxv_qp *qp, struct gxv_recv_wr *wr);

#endif
