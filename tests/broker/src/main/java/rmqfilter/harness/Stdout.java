package rmqfilter.harness;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/** run.py reads only our answers on stdout: everything else printed there (logging's own status lines) goes to stderr. */
final class Stdout {
    private Stdout() {
    }

    /** Call first in main: returns the real stdout and points System.out at stderr. */
    static PrintStream claim() {
        PrintStream real = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        return real;
    }
}
