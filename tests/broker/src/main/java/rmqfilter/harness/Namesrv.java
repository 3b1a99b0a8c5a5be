package rmqfilter.harness;

import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * A NameServer in its own JVM: {@code Namesrv PORT HOME}. Prints {@code READY} when it listens
 * on 127.0.0.1:PORT; SIGTERM shuts it down (JVM shutdown hook).
 */
public final class Namesrv {
    private Namesrv() {
    }

    public static void main(String[] args) throws Exception {
        java.io.PrintStream out = Stdout.claim();
        // As the NameServer's own start-up does: requests carry this version (brokers read it).
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        int port = Integer.parseInt(args[0]);
        NamesrvConfig config = new NamesrvConfig();
        config.setRocketmqHome(args[1]);
        config.setKvConfigPath(args[1] + "/kvConfig.json");
        config.setConfigStorePath(args[1] + "/namesrv.properties");
        NettyServerConfig server = new NettyServerConfig();
        server.setBindAddress("127.0.0.1");
        server.setListenPort(port);
        NamesrvController controller = new NamesrvController(config, server, new NettyClientConfig());
        if (!controller.initialize()) {
            System.err.println("NameServer failed to initialize");
            System.exit(3);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(controller::shutdown, "namesrv-shutdown"));
        controller.start();
        out.println("READY namesrv 127.0.0.1:" + port);
        Thread.currentThread().join();
    }
}
