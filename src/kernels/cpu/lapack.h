// LAPACK's Fortran routines that the linalg kernels call, as OpenBLAS (the
// BLAS kiln links already) exports them: Debian builds OpenBLAS with LAPACK
// inside, with 32-bit integers. Its headers declare only the BLAS, hence the
// declarations here. Column-major, every argument by address; a character
// argument's length follows the others (gfortran's calling convention).
// Overloads on float/double give the kernels one name per routine.
#pragma once
#include <cstddef>

extern "C" {
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetri_(const int* n, float* a, const int* lda, const int* ipiv, float* work, const int* lwork, int* info);
void dgetri_(const int* n, double* a, const int* lda, const int* ipiv, double* work, const int* lwork, int* info);
void sgesv_(const int* n, const int* nrhs, float* a, const int* lda, int* ipiv, float* b, const int* ldb, int* info);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t, size_t);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t, size_t);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
             const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info, size_t);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t);
}

namespace kiln::cpu::lapack {

inline void getrf(int m, int n, float* a, int lda, int* ipiv, int& info) { sgetrf_(&m, &n, a, &lda, ipiv, &info); }
inline void getrf(int m, int n, double* a, int lda, int* ipiv, int& info) { dgetrf_(&m, &n, a, &lda, ipiv, &info); }
inline void getri(int n, float* a, int lda, const int* ipiv, float* work, int lwork, int& info) {
  sgetri_(&n, a, &lda, ipiv, work, &lwork, &info);
}
inline void getri(int n, double* a, int lda, const int* ipiv, double* work, int lwork, int& info) {
  dgetri_(&n, a, &lda, ipiv, work, &lwork, &info);
}
inline void gesv(int n, int nrhs, float* a, int lda, int* ipiv, float* b, int ldb, int& info) {
  sgesv_(&n, &nrhs, a, &lda, ipiv, b, &ldb, &info);
}
inline void gesv(int n, int nrhs, double* a, int lda, int* ipiv, double* b, int ldb, int& info) {
  dgesv_(&n, &nrhs, a, &lda, ipiv, b, &ldb, &info);
}
inline void potrf(char uplo, int n, float* a, int lda, int& info) { spotrf_(&uplo, &n, a, &lda, &info, 1); }
inline void potrf(char uplo, int n, double* a, int lda, int& info) { dpotrf_(&uplo, &n, a, &lda, &info, 1); }
inline void geqrf(int m, int n, float* a, int lda, float* tau, float* work, int lwork, int& info) {
  sgeqrf_(&m, &n, a, &lda, tau, work, &lwork, &info);
}
inline void geqrf(int m, int n, double* a, int lda, double* tau, double* work, int lwork, int& info) {
  dgeqrf_(&m, &n, a, &lda, tau, work, &lwork, &info);
}
inline void orgqr(int m, int n, int k, float* a, int lda, const float* tau, float* work, int lwork, int& info) {
  sorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, &info);
}
inline void orgqr(int m, int n, int k, double* a, int lda, const double* tau, double* work, int lwork, int& info) {
  dorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, &info);
}
inline void syevd(char jobz, char uplo, int n, float* a, int lda, float* w, float* work, int lwork, int* iwork,
                  int liwork, int& info) {
  ssyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, &info, 1, 1);
}
inline void syevd(char jobz, char uplo, int n, double* a, int lda, double* w, double* work, int lwork, int* iwork,
                  int liwork, int& info) {
  dsyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, &info, 1, 1);
}
inline void gesdd(char jobz, int m, int n, float* a, int lda, float* s, float* u, int ldu, float* vt, int ldvt,
                  float* work, int lwork, int* iwork, int& info) {
  sgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &info, 1);
}
inline void gesdd(char jobz, int m, int n, double* a, int lda, double* s, double* u, int ldu, double* vt, int ldvt,
                  double* work, int lwork, int* iwork, int& info) {
  dgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &info, 1);
}

}  // namespace kiln::cpu::lapack
