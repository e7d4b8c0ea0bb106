/* MPI-IO on pvfs: every rank writes its blocks of one shared file
 * through a strided file view with MPI_File_write_at_all (collective), the file is
 * closed and reopened, every rank reads its blocks back with MPI_File_read_at_all and
 * verifies every byte; rank 0 checks the file size and prints the slowest rank's times.
 *
 *   mpiexec -n P ./stripes PATH BLOCK BLOCKS_PER_RANK
 *
 * Rank r owns blocks r, r+P, r+2P, ... (the file view: BLOCKS_PER_RANK blocks of BLOCK
 * bytes, one every P*BLOCK bytes, starting at r*BLOCK). Exit status 0 only if all ranks
 * verified their data. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int rank, long block, long i) {
    return (unsigned char)((rank * 131 + block * 17 + i * 7) & 0xff);
}

static void fail(int rank, const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, procs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &procs);
    if (argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: %s PATH BLOCK BLOCKS_PER_RANK\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[1];
    long block = atol(argv[2]);
    long blocks = atol(argv[3]);
    long mine = block * blocks;
    unsigned char *buf = malloc((size_t)mine);
    if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
    for (long b = 0; b < blocks; b++)
        for (long i = 0; i < block; i++) buf[b * block + i] = pattern(rank, b, i);

    MPI_Datatype view;
    MPI_Type_vector((int)blocks, (int)block, (int)(procs * block), MPI_BYTE, &view);
    MPI_Type_commit(&view);

    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                           MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) fail(rank, "open for writing", rc);
    rc = MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, view, "native",
                           MPI_INFO_NULL);
    if (rc != MPI_SUCCESS) fail(rank, "set_view", rc);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Status st;
    rc = MPI_File_write_at_all(fh, 0, buf, (int)mine, MPI_BYTE, &st);
    if (rc != MPI_SUCCESS) fail(rank, "write_at_all", rc);
    rc = MPI_File_close(&fh);
    if (rc != MPI_SUCCESS) fail(rank, "close", rc);
    double wt = MPI_Wtime() - t0;

    memset(buf, 0, (size_t)mine);
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) fail(rank, "open for reading", rc);
    rc = MPI_File_set_view(fh, (MPI_Offset)rank * block, MPI_BYTE, view, "native",
                           MPI_INFO_NULL);
    if (rc != MPI_SUCCESS) fail(rank, "set_view (read)", rc);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    rc = MPI_File_read_at_all(fh, 0, buf, (int)mine, MPI_BYTE, &st);
    if (rc != MPI_SUCCESS) fail(rank, "read_at_all", rc);
    double rt = MPI_Wtime() - t0;
    MPI_Offset size = 0;
    MPI_File_get_size(fh, &size);
    MPI_File_close(&fh);

    long bad = 0;
    for (long b = 0; b < blocks && bad == 0; b++)
        for (long i = 0; i < block; i++)
            if (buf[b * block + i] != pattern(rank, b, i)) {
                fprintf(stderr, "rank %d: byte %ld of block %ld differs\n", rank, i, b);
                bad = 1;
                break;
            }
    long anybad = 0;
    double wmax = 0, rmax = 0;
    MPI_Reduce(&bad, &anybad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wt, &wmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&rt, &rmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 0) {
        long long want = (long long)procs * mine;
        if (anybad) ok = 0;
        if ((long long)size != want) {
            fprintf(stderr, "file size %lld, expected %lld\n", (long long)size, want);
            ok = 0;
        }
        double mib = (double)want / (1 << 20);
        printf("procs=%d bytes=%lld write_s=%.4f read_s=%.4f write_mib_s=%.1f read_mib_s=%.1f verified=%s\n",
               procs, want, wmax, rmax, mib / wmax, mib / rmax, ok ? "yes" : "NO");
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(buf);
    MPI_Type_free(&view);
    MPI_Finalize();
    return ok ? 0 : 1;
}
