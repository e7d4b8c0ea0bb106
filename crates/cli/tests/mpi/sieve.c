/* ROMIO data sieving under contention: two ranks, each on its own path to one file
 * (argv[1 + rank]: the same pvfs file through two different mounts, as on two
 * nodes), each opens it alone (MPI_COMM_SELF) with data sieving of writes on, and
 * writes its interleaved blocks (rank r: blocks r, r + 2, ...) with many independent
 * noncontiguous writes. Data sieving reads the whole extent of each write, changes
 * this rank's blocks and writes the extent back under an fcntl write lock over it:
 * without locks that hold between the two clients one rank's read-modify-write
 * puts back old bytes over the other's blocks. Usage: sieve PATH0 PATH1 BLOCK
 * BLOCKS_PER_RANK BLOCKS_PER_CALL. The test checks the file's bytes afterwards.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int rank, long block, long i) {
    return (unsigned char)((rank * 131 + block * 17 + i * 7) & 0xff);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 6 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 sieve PATH0 PATH1 BLOCK BLOCKS PER_CALL\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *path = argv[1 + rank];
    long block = atol(argv[3]), blocks = atol(argv[4]), per_call = atol(argv[5]);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_ds_write", "enable");
    MPI_Info_set(info, "romio_cb_write", "disable");
    MPI_File fh;
    int err = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh);
    if (err != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: cannot open %s\n", rank, path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Datatype filetype;
    MPI_Type_vector((int)blocks, (int)block, (int)(2 * block), MPI_BYTE, &filetype);
    MPI_Type_commit(&filetype);
    MPI_File_set_view(fh, (MPI_Offset)(rank * block), MPI_BYTE, filetype, "native", info);
    unsigned char *buf = malloc((size_t)(block * per_call));
    MPI_Barrier(MPI_COMM_WORLD);
    for (long first = 0; first < blocks; first += per_call) {
        long n = blocks - first < per_call ? blocks - first : per_call;
        for (long b = 0; b < n; b++)
            for (long i = 0; i < block; i++) buf[b * block + i] = pattern(rank, first + b, i);
        MPI_Status st;
        err = MPI_File_write_at(fh, (MPI_Offset)(first * block), buf, (int)(n * block), MPI_BYTE, &st);
        if (err != MPI_SUCCESS) {
            fprintf(stderr, "rank %d: write at block %ld failed\n", rank, first);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("written: 2 ranks x %ld blocks of %ld bytes\n", blocks, block);
    free(buf);
    MPI_Type_free(&filetype);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
