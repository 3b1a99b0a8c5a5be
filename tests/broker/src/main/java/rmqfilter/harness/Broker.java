package rmqfilter.harness;

import java.io.PrintStream;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.BrokerStartup;

/**
 * A broker in its own JVM: {@code Broker FILE.properties}. The broker's own start-up API reads the
 * file (every key set on the broker's config objects, as {@code mqbroker -c} does), initializes the
 * controller and registers the JVM shutdown hook, so SIGTERM shuts the broker down cleanly (files
 * flushed, abort file removed) and SIGKILL leaves the store as a crash leaves it. Prints
 * {@code READY} once it serves.
 */
public final class Broker {
    private Broker() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = Stdout.claim();
        BrokerController controller = BrokerStartup.createBrokerController(new String[] {"-c", args[0]});
        BrokerStartup.start(controller);
        out.println("READY broker " + controller.getBrokerConfig().getBrokerName() + " " + controller.getBrokerAddr());
        Thread.currentThread().join();
    }
}
