/* The OpenMPI peer of kiln-bench-collectives: MPI_Allreduce (float sum) of
 * random data at each size given, timed as kiln's collectives are (ranks
 * meet at a barrier before each batch of calls; rank 0 times the batch; the
 * best of five batches). Rank 0 prints "mpi <ranks> <bytes> <seconds per call>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double time_batch(float* in, float* out, int n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return (MPI_Wtime() - t0) / iters;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int a = 1; a < argc; ++a) {
    const long bytes = atol(argv[a]);
    const int n = (int)(bytes / 4);
    float* in = malloc(bytes);
    float* out = malloc(bytes);
    srand(1234 + rank);
    for (int i = 0; i < n; ++i) in[i] = (float)rand() / RAND_MAX - 0.5f;
    int iters = 1;
    /* Calibrate on rank 0's clock to about 50 ms per batch; every rank runs the same count. */
    for (;;) {
      double t = time_batch(in, out, n, iters);
      MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (t * iters > 0.05 || iters >= (1 << 20)) break;
      iters *= 4;
    }
    double best = 1e30;
    for (int b = 0; b < 5; ++b) {
      double t = time_batch(in, out, n, iters);
      if (t < best) best = t;
    }
    if (rank == 0) printf("mpi %d %ld %.9g\n", size, bytes, best);
    free(in);
    free(out);
  }
  MPI_Finalize();
  return 0;
}
