/* Every rank writes its 64 KiB block of file DIR/f<i> (MPI_File_write_at_all, then
 * MPI_File_sync and MPI_File_close), for i = 0, 1, ... until rank 0 finds the local
 * file STOP (and at least 5 files). Any MPI error ends the run with status 1. Rank 0
 * prints "files N longest SECONDS" (the longest file, open to close). The byte at k
 * of rank r's block of file i is (r * 31 + i * 7 + k) & 0xff.
 *
 *     mpiexec -n RANKS failover_loop ufs:DIR STOP
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 65536

static void check(int rc, const char *what, long i) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "%s of file %ld: %s\n", what, i, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3) {
        if (rank == 0)
            fprintf(stderr, "usage: failover_loop ufs:DIR STOP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *dir = argv[1], *stop = argv[2];
    if (rank == 0) {
        const char *local = dir;
        if (local[0] == 'u' && local[1] == 'f' && local[2] == 's' && local[3] == ':')
            local += 4;
        if (mkdir(local, 0755) != 0) {
            perror("mkdir");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    static unsigned char buf[BLOCK];
    double longest = 0;
    long i = 0;
    for (;;) {
        int done = 0;
        if (rank == 0)
            done = i >= 5 && access(stop, F_OK) == 0;
        MPI_Bcast(&done, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (done)
            break;
        double t = MPI_Wtime();
        for (long k = 0; k < BLOCK; k++)
            buf[k] = (unsigned char)((rank * 31 + i * 7 + k) & 0xff);
        char path[4096];
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        MPI_File fh;
        check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                            MPI_INFO_NULL, &fh),
              "open", i);
        MPI_Status st;
        check(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, buf, BLOCK, MPI_BYTE, &st),
              "write", i);
        check(MPI_File_sync(fh), "sync", i);
        check(MPI_File_close(&fh), "close", i);
        double took = MPI_Wtime() - t;
        if (took > longest)
            longest = took;
        i++;
    }
    if (rank == 0)
        printf("files %ld longest %.3f\n", i, longest);
    MPI_Finalize();
    return 0;
}
